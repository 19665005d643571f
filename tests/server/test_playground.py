"""The playground at `/`: served through the guard, drawn by a real browser, its answers and snippets equal the API's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import requests
from browser import chromium
from conftest import REAL_MODEL_CACHE
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait
from server_process import ServerProcess, tiny_model_env
from wire_samples import make_app

KEY = "playground-key"
TEXT = "I was charged twice for my subscription this month. Please give me my money back."
QUESTIONS = [
    {"type": "predicate", "name": "refund", "instructions": "Is the customer asking for a refund?"},
    {
        "type": "choice",
        "name": "team",
        "instructions": "Which team should handle this ticket?",
        "choices": [{"value": "billing"}, {"value": "technical"}, {"value": "sales"}],
    },
]


# ---------------------------------------------------------------- the route (Flask test client)


def test_page_and_assets_are_served_with_security_headers() -> None:
    client = make_app().test_client()
    page = client.get("/")
    assert page.status_code == 200 and page.mimetype == "text/html"
    assert '<meta name="decide-key-required" content="false">' in page.text
    assert (
        page.headers["X-Frame-Options"] == "DENY"
        and "frame-ancestors 'none'" in page.headers["Content-Security-Policy"]
    )
    for name, mimetype in [("playground.js", "text/javascript"), ("playground.css", "text/css")]:
        asset = client.get(f"/playground/{name}")
        assert (asset.status_code, asset.mimetype) == (200, mimetype) and f"/playground/{name}" in page.text
    missing = client.get("/playground/../app.py")
    assert missing.status_code == 404 and missing.is_json
    assert client.get("/playground/index.html").status_code == 404


def test_the_page_says_a_key_is_needed_but_never_holds_it() -> None:
    page = make_app(api_key=KEY).test_client().get("/")
    assert page.status_code == 200
    assert '<meta name="decide-key-required" content="true">' in page.text and KEY not in page.text


@pytest.mark.parametrize("path", ["/", "/playground/playground.js"])
def test_the_page_goes_through_the_host_and_origin_guard(path: str) -> None:
    client = make_app().test_client()
    assert client.get(path, headers={"Host": "evil.example"}).status_code == 403
    assert client.get(path, headers={"Origin": "http://evil.example"}).status_code == 403
    assert client.get(path, headers={"Host": "localhost:8000", "Origin": "http://localhost:8000"}).status_code == 200


# ---------------------------------------------------------------- a real browser against gunicorn


def wait(driver, until, timeout: float = 60):
    return WebDriverWait(driver, timeout).until(until)


def open_page(driver, url: str) -> None:
    driver.get(url)
    wait(driver, lambda d: d.find_element(By.ID, "status").text.startswith("model "))


def build_request(driver, text: str, questions: list[dict]) -> None:
    """Type the request into the page as a person would: clear the examples, add each question."""
    for button in driver.find_elements(By.CSS_SELECTOR, ".question .remove"):
        button.click()
    area = driver.find_element(By.ID, "text")
    area.clear()
    area.send_keys(text)
    for q in questions:
        driver.find_element(By.CSS_SELECTOR, f'[data-add="{q["type"]}"]').click()
        item = driver.find_elements(By.CSS_SELECTOR, ".question")[-1]
        fields = [("name", q["name"]), ("instructions", q["instructions"])]
        if q["type"] != "predicate":
            fields.append(("options", _options(q)))
        for field, value in fields:
            box = item.find_element(By.CLASS_NAME, field)
            box.clear()
            box.send_keys(value)


def _options(q: dict) -> str:
    items = [str(c["value"]) for c in q.get("choices", [])] + [lv["label"] for lv in q.get("levels", [])]
    return "\n".join(items)


def submit(driver) -> None:
    driver.find_element(By.ID, "submit").click()
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ".answer") or d.find_element(By.ID, "error").text)


def rendered(driver) -> dict[str, list[tuple[str, str, float]]]:
    """Per question: (label, the percentage as shown, the probability in the row's tooltip)."""
    out = {}
    for answer in driver.find_elements(By.CSS_SELECTOR, ".answer"):
        rows = answer.find_elements(By.CSS_SELECTOR, ".bar-row")
        out[answer.get_attribute("data-name")] = [
            (
                row.find_element(By.CLASS_NAME, "label").text,
                row.find_element(By.CLASS_NAME, "p").text,
                float(row.find_element(By.CLASS_NAME, "p").get_attribute("title")),
            )
            for row in rows
        ]
    return out


def api_rows(answer: dict) -> list[tuple[str, float]]:
    if answer["type"] == "predicate":
        return [("yes", answer["probability"]), ("no", 1 - answer["probability"])]
    return [(str(p.get("label", p["value"])), p["probability"]) for p in answer["probabilities"]]


def snippet(driver, kind: str) -> str:
    driver.find_element(By.CSS_SELECTOR, f'[data-snippet="{kind}"]').click()
    return driver.find_element(By.ID, "snippet").text


@pytest.fixture(scope="module")
def smollm_server():
    env = {"DECIDE_MODEL": "smollm2-135m", "DECIDE_CACHE_DIR": str(REAL_MODEL_CACHE), "DECIDE_API_KEY": ""}
    with ServerProcess.start("wsgi:app", env=env) as server:
        yield server


@pytest.mark.smollm
def test_the_browser_shows_the_apis_answers_and_its_snippets_run(smollm_server) -> None:
    with chromium() as driver:
        open_page(driver, smollm_server.url + "/")
        build_request(driver, TEXT, QUESTIONS)
        submit(driver)
        shown = rendered(driver)
        usage = driver.find_element(By.ID, "usage").text
        snippets = {kind: snippet(driver, kind) for kind in ("curl", "openai", "typesafe")}
    body = {"model": "smollm2-135m", "input": TEXT, "questions": QUESTIONS}
    api = requests.post(smollm_server.url + "/v1/decisions", json=body, timeout=60).json()
    assert list(shown) == [q["name"] for q in QUESTIONS]
    for answer in api["answers"]:
        rows = shown[answer["name"]]
        expected = api_rows(answer)
        assert [label for label, _, _ in rows] == [label for label, _ in expected]
        for (_, text, p), (_, q) in zip(rows, expected, strict=True):
            assert p == pytest.approx(q, abs=1e-6) and text == f"{100 * q:.1f}%"
    assert 0.02 < api["answers"][0]["probability"] < 0.98  # a real distribution, not a saturated one
    assert usage.startswith(f"{api['usage']['input_tokens']} input tokens")
    check_snippets(snippets, api, smollm_server.url)


def check_snippets(snippets: dict[str, str], api: dict, url: str) -> None:
    """Each "copy as" snippet, run as a user would paste it, gets the page's answers."""
    python = [sys.executable, "-c"]
    *answers, usage = map(json.loads, _run([*python, snippets["openai"]]).splitlines())
    assert answers == _close(api["answers"]) and usage["input_tokens"] == api["usage"]["input_tokens"]
    systemone = requests.post(url + "/v1/systemone", json=_systemone_body(), timeout=60).json()
    lines = _run([*python, snippets["typesafe"]]).splitlines()
    answers = {name: json.loads(rest) for name, _, rest in (line.partition(" ") for line in lines)}
    assert {name: a["probabilities"] if "probabilities" in a else a["noul"] for name, a in answers.items()} == {
        name: pytest.approx(a["probabilities"] if "probabilities" in a else a["noul"], abs=1e-6)
        for name, a in systemone["answers"].items()
    }
    noul = systemone["answers"]["refund"]["noul"]
    assert noul == pytest.approx(api["answers"][0]["probability"], abs=1e-5)  # the same question in both protocols
    if shutil.which("curl"):
        assert json.loads(_run(["bash", "-c", snippets["curl"]]))["answers"] == _close(api["answers"])


def _systemone_body() -> dict:
    q0, q1 = QUESTIONS
    return {
        "model": "smollm2-135m",
        "state": TEXT,
        "questions": {
            q0["name"]: {"type": "noul", "instructions": q0["instructions"]},
            q1["name"]: {
                "type": "choice",
                "instructions": q1["instructions"],
                "criteria": {c["value"]: None for c in q1["choices"]},
            },
        },
    }


def _run(cmd: list[str], env: dict[str, str] | None = None) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})
    assert done.returncode == 0, f"{cmd[:2]} failed:\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory):
    env = tiny_model_env(tmp_path_factory.mktemp("playground-key"), DECIDE_API_KEY=KEY)
    with ServerProcess.start("wsgi:app", env=env) as server:
        yield server


def error_text(driver) -> str:
    return wait(driver, lambda d: d.find_element(By.ID, "error").text)


def test_the_page_asks_for_the_key_and_explains_a_401(keyed_server) -> None:
    with chromium() as driver:
        open_page(driver, keyed_server.url + "/")
        key = driver.find_element(By.ID, "api-key")
        assert key.is_displayed()
        driver.find_element(By.ID, "submit").click()
        assert "needs an API key" in error_text(driver)
        key.send_keys("wrong-key")
        submit(driver)
        assert "did not accept this API key (401)" in error_text(driver)
        assert not driver.find_elements(By.CSS_SELECTOR, ".answer")
        key.clear()
        key.send_keys(KEY)
        submit(driver)
        assert [a.get_attribute("data-name") for a in driver.find_elements(By.CSS_SELECTOR, ".answer")] == [
            "refund",
            "team",
            "anger",
        ]
        assert not driver.find_element(By.ID, "error").is_displayed()
        assert 'os.environ["DECIDE_API_KEY"]' in snippet(driver, "openai") and KEY not in snippet(driver, "typesafe")
        driver.refresh()
        assert driver.find_element(By.ID, "api-key").get_attribute("value") == KEY  # kept for this tab only


def test_a_rebinding_page_gets_403_in_the_browser(keyed_server) -> None:
    """A name that resolves to 127.0.0.1 (as DNS rebinding makes it) is not served: the browser shows the 403."""
    with chromium(f"--host-resolver-rules=MAP evil.example 127.0.0.1:{keyed_server.port}") as driver:
        driver.get(f"http://evil.example:{keyed_server.port}/")
        body = json.loads(driver.find_element(By.TAG_NAME, "body").text)
        assert body["error"]["code"] == "host_not_allowed"
        assert not driver.find_elements(By.ID, "submit")


TRICKY_TEXT = 'It\'s "quoted", a \\backslash, $HOME and `date`;\nsecond line: ü é 中 <b>not html</b> {"json": 1}'
TRICKY = [
    {"type": "predicate", "name": "odd's", "instructions": 'Does it say "quoted"?'},
    {
        "type": "choice",
        "name": "pick",
        "instructions": "Which one?",
        "choices": [{"value": "it's"}, {"value": '"q"'}, {"value": "a\\b"}, {"value": "True"}],
    },
    {"type": "score", "name": "level", "instructions": "How odd?", "levels": [{"label": "$low"}, {"label": "{high}"}]},
]


def test_snippets_carry_any_text_and_read_the_key_from_the_environment(keyed_server) -> None:
    """Quotes, backslashes, $ and backticks, newlines and non-ASCII survive each snippet's quoting:
    run with DECIDE_API_KEY set, each gets the same input tokens and answers as the API."""
    with chromium() as driver:
        open_page(driver, keyed_server.url + "/")
        driver.find_element(By.ID, "api-key").send_keys(KEY)
        build_request(driver, TRICKY_TEXT, TRICKY)
        snippets = {kind: snippet(driver, kind) for kind in ("curl", "openai", "typesafe")}
    assert KEY not in "".join(snippets.values())
    headers = {"Authorization": f"Bearer {KEY}"}
    body = {"model": "tiny", "input": TRICKY_TEXT, "questions": TRICKY}
    api = requests.post(keyed_server.url + "/v1/decisions", json=body, headers=headers, timeout=60).json()
    env = {"DECIDE_API_KEY": KEY}
    *answers, usage = map(json.loads, _run([sys.executable, "-c", snippets["openai"]], env).splitlines())
    assert answers == _close(api["answers"]) and usage["input_tokens"] == api["usage"]["input_tokens"]
    if shutil.which("curl"):
        sent = json.loads(_run(["bash", "-c", snippets["curl"]], env))
        assert sent["usage"]["input_tokens"] == api["usage"]["input_tokens"] and sent["answers"] == _close(
            api["answers"]
        )
    lines = _run([sys.executable, "-c", snippets["typesafe"]], env).splitlines()
    assert [line.partition(" ")[0] for line in lines] == [q["name"] for q in TRICKY]


def _close(value):
    """`value` with each float up to float32 noise (a cold and a warm prefix cache differ by ~1e-5 of a
    log-likelihood), relative too: the tiny model's probabilities can be 1e-9."""
    if isinstance(value, float):
        return pytest.approx(value, rel=1e-4, abs=1e-6)
    if isinstance(value, list):
        return [_close(v) for v in value]
    if isinstance(value, dict):
        return {k: _close(v) for k, v in value.items()}
    return value
