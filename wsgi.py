from decide.server import create_app

app = create_app()
