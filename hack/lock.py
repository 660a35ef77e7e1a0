"""Hash-locked requirement files for the two images: requirements/<image>.lock.

Each lists exactly what its Dockerfile installs before the project itself: the project's
dependencies plus the image's extra, and everything they need on Linux x86_64 with CPython
3.11, at the versions constraints.txt pins (the one source of versions), each with the
sha256 of every file of that release such an install can pick. The Dockerfiles install a
lock with `pip install --require-hashes --no-deps`, so a file on the index that changed,
or one pip was never told of, fails the build.

The set of packages comes from the installed metadata of the virtualenv (`make venv`
installs from constraints.txt), walked with the target's markers: offline, so
tests/unit/test_lock.py recomputes it and fails when pyproject.toml or constraints.txt
changed without `make lock`. Only the hashes need the index (PEP 691 JSON, pip's index).

Regenerate: `make lock` (.venv/bin/python -m hack.lock).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import ssl
import sys
import tomllib
import urllib.request
from collections.abc import Callable, Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
LOCKS = ROOT / "requirements"
# image -> the extra its Dockerfile installs (tests/unit/test_packaging.py checks it does).
IMAGES = {"operator": "operator", "trainer": "trainer"}
REGENERATE = "make lock"
INDEX_URL = "https://pypi.org/simple"

# Where the images run: the python:3.11 slim images (Debian bookworm, glibc 2.36; trixie's
# 2.41 is the newest base tests/unit/test_packaging.py allows) on x86_64.
TARGET_ENV = {
    "implementation_name": "cpython",
    "implementation_version": "3.11.14",
    "os_name": "posix",
    "platform_machine": "x86_64",
    "platform_python_implementation": "CPython",
    "platform_release": "",
    "platform_system": "Linux",
    "platform_version": "",
    "python_full_version": "3.11.14",
    "python_version": "3.11",
    "sys_platform": "linux",
}
GLIBC_MINORS = range(41, 4, -1)
PLATFORMS = [f"manylinux_2_{m}_x86_64" for m in GLIBC_MINORS] + [
    "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64"]
TARGET_TAGS: frozenset[Tag] = frozenset(
    [*cpython_tags((3, 11), abis=["cp311"], platforms=PLATFORMS),
     *compatible_tags((3, 11), "cp311", PLATFORMS)])


class LockError(Exception):
    """The inputs do not make a lock (a dependency unpinned, not installed, ...)."""


# --- what each image installs (offline) -------------------------------------------------


def read_constraints(text: str) -> dict[str, tuple[str, str]]:
    """canonical name -> (name as written, version) of each `name==version` line."""
    pins: dict[str, tuple[str, str]] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", line)
        if not match:
            raise LockError(f"constraints.txt:{number}: {line!r} is not name==version")
        pins[canonicalize_name(match[1])] = (match[1], match[2])
    return pins


def top_requirements(pyproject: dict[str, Any], extra: str) -> list[Requirement]:
    project = pyproject["project"]
    return [Requirement(r) for r in
            project["dependencies"] + project["optional-dependencies"][extra]]


def installed_requires(name: str) -> list[str]:
    try:
        return metadata.distribution(name).requires or []
    except metadata.PackageNotFoundError:
        raise LockError(
            f"{name} is not installed in this virtualenv, so its dependencies are unknown: "
            "run `make venv`") from None


def installed_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def wanted(req: Requirement, extras: Iterable[str]) -> bool:
    if req.marker is None:
        return True
    return any(req.marker.evaluate({**TARGET_ENV, "extra": e}) for e in (list(extras) or [""]))


def closure(top: list[Requirement], constraints: dict[str, tuple[str, str]],
            requires: Callable[[str], list[str]] = installed_requires,
            ) -> dict[str, tuple[str, str]]:
    """canonical name -> (name, version) of every distribution `top` needs on the target,
    at the pinned versions; each edge checked against the pin it lands on."""
    found: dict[str, tuple[str, str]] = {}
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [(req, "pyproject.toml") for req in top if wanted(req, [])]
    while todo:
        req, by = todo.pop()
        key = canonicalize_name(req.name)
        if key not in constraints:
            raise LockError(f"{req.name} (needed by {by}) is not pinned in constraints.txt: "
                            "add it (the version `make venv` installed), then `make lock`")
        name, version = constraints[key]
        if not req.specifier.contains(version, prereleases=True):
            raise LockError(f"{by} needs {req}, but constraints.txt pins {name}=={version}")
        found[key] = (name, version)
        extras = frozenset(req.extras)
        if (key, extras) in seen:
            continue
        seen.add((key, extras))
        for line in requires(name):
            dep = Requirement(line)
            if wanted(dep, extras):
                todo.append((dep, f"{name}=={version}"))
    return found


def pins(extra: str, pyproject_text: str | None = None, constraints_text: str | None = None,
         ) -> dict[str, tuple[str, str]]:
    """What the image of `extra` installs, from the committed inputs (or the given texts)."""
    pyproject = tomllib.loads(pyproject_text if pyproject_text is not None
                              else (ROOT / "pyproject.toml").read_text())
    constraints = read_constraints(constraints_text if constraints_text is not None
                                   else (ROOT / "constraints.txt").read_text())
    found = closure(top_requirements(pyproject, extra), constraints)
    stale = {n: (v, installed_version(n)) for n, v in found.values()
             if installed_version(n) != v}
    if stale:
        raise LockError(f"the virtualenv differs from constraints.txt ({stale}): run `make venv`")
    return found


# --- the lock file ----------------------------------------------------------------------


def header(image: str, extra: str, index_url: str) -> str:
    return (
        f"# What Dockerfile.{image} installs before the project, with\n"
        f"# `pip install --require-hashes --no-deps -r requirements/{image}.lock`.\n"
        f"# Generated by `{REGENERATE}` (hack/lock.py) from pyproject.toml (dependencies and\n"
        f"# [{extra}]) and constraints.txt's versions; do not edit. The sha256 of every file\n"
        f"# of each release a Linux x86_64 CPython 3.11 install can pick, from {index_url}.\n"
    )


def render(image: str, found: dict[str, tuple[str, str]],
           hashes: dict[str, list[str]], index_url: str = INDEX_URL) -> str:
    lines = [header(image, IMAGES[image], index_url)]
    for key in sorted(found):
        name, version = found[key]
        lines.append(" \\\n".join([f"{name}=={version}"]
                                  + [f"    --hash=sha256:{h}" for h in sorted(hashes[key])]))
        lines.append("\n")
    return "".join(lines)


def parse_lock(text: str) -> dict[str, tuple[str, list[str]]]:
    """canonical name -> (version, sha256s) of a lock file; refuses anything else."""
    entries: dict[str, tuple[str, list[str]]] = {}
    joined = re.sub(r"\\\n", " ", text)
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)((?:\s+--hash=sha256:\S+)+)",
                             line)
        if not match:
            raise LockError(f"not `name==version --hash=sha256:...`: {line!r}")
        digests = re.findall(r"--hash=sha256:(\S+)", match[3])
        bad = [d for d in digests if not re.fullmatch(r"[0-9a-f]{64}", d)]
        if bad:
            raise LockError(f"{match[1]}: not a sha256: {bad}")
        entries[canonicalize_name(match[1])] = (match[2], digests)
    return entries


def stale(lock_text: str, expected: dict[str, tuple[str, str]]) -> list[str]:
    """How a lock file differs from what its image installs ([] when current)."""
    locked = {key: version for key, (version, _) in parse_lock(lock_text).items()}
    wanted_versions = {key: version for key, (_, version) in expected.items()}
    lines = [f"{key}: not in the lock (wanted {v})" for key, v in sorted(wanted_versions.items())
             if key not in locked]
    lines += [f"{key}=={v}: in the lock, but the image no longer needs it"
              for key, v in sorted(locked.items()) if key not in wanted_versions]
    lines += [f"{key}: the lock has {locked[key]}, constraints.txt {v}"
              for key, v in sorted(wanted_versions.items()) if key in locked and locked[key] != v]
    return lines


# --- hashes from the index --------------------------------------------------------------


def pickable(filename: str, version: str) -> str | None:
    """'wheel' or 'sdist' where `filename` is a file of `version` that the target could
    install; None otherwise (another version, platform or Python)."""
    try:
        _, wheel_version, _, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        pass
    else:
        return "wheel" if wheel_version == Version(version) and tags & TARGET_TAGS else None
    try:
        _, sdist_version = parse_sdist_filename(filename)
    except InvalidSdistFilename:
        return None
    return "sdist" if sdist_version == Version(version) else None


def select_hashes(files: list[dict[str, Any]], name: str, version: str) -> list[str]:
    """The sha256 of each wheel the target can pick; the sdist's only where there is none
    (pip builds from it only then)."""
    kinds: dict[str, list[str]] = {"wheel": [], "sdist": []}
    for f in files:
        kind = pickable(f["filename"], version)
        if kind and "sha256" in f.get("hashes", {}):
            kinds[kind].append(f["hashes"]["sha256"])
    chosen = kinds["wheel"] or kinds["sdist"]
    if not chosen:
        raise LockError(f"the index has no file of {name}=={version} for Linux x86_64 CPython 3.11")
    return sorted(chosen)


def index_files(index_url: str, name: str) -> list[dict[str, Any]]:
    """The files the index lists for a project (PEP 691 JSON, as pip reads it)."""
    request = urllib.request.Request(
        f"{index_url.rstrip('/')}/{canonicalize_name(name)}/",
        headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    # pip's CA bundle where one is configured (a TLS-inspecting proxy), else the system's.
    context = ssl.create_default_context(cafile=os.environ.get("PIP_CERT") or None)
    with urllib.request.urlopen(request, timeout=60, context=context) as response:
        files: list[dict[str, Any]] = json.load(response)["files"]
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index-url", default=INDEX_URL)
    args = parser.parse_args(argv)
    try:
        found = {image: pins(extra) for image, extra in IMAGES.items()}
        every = {k: v for f in found.values() for k, v in f.items()}
        hashes = {k: select_hashes(index_files(args.index_url, name), name, version)
                  for k, (name, version) in sorted(every.items())}
    except LockError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    LOCKS.mkdir(exist_ok=True)
    for image, image_pins in found.items():
        path = LOCKS / f"{image}.lock"
        path.write_text(render(image, image_pins, hashes, args.index_url))
        count = sum(len(hashes[k]) for k in image_pins)
        print(f"wrote {path.relative_to(ROOT)}: {len(image_pins)} packages, {count} hashes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
