"""The two images, checked without a Docker engine.

Each Dockerfile is parsed: every file it copies must exist in the repository and pass
.dockerignore, it must end as a numeric non-root user created in the final stage, its
base must be pinned by digest (a base without one refused by the build itself), its
dependencies installed from requirements/<image>.lock by hash, and the command of its
ENTRYPOINT must work after a plain install of the extra it installs. The last check runs
`etj` in a subprocess where every module that the extra (and the base dependencies) would
not bring is made unimportable, so a subcommand that quietly needs jax (operator) or kopf
(trainer) fails here and not in a cluster.
"""
from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import textwrap
import tomllib
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from hack import lock

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT_NAME = PYPROJECT["project"]["name"]

# image -> (Dockerfile, the extra it must install, the subcommand its ENTRYPOINT runs)
IMAGES = {
    "operator": ("Dockerfile.operator", "operator", "operator"),
    "trainer": ("Dockerfile.trainer", "trainer", "train"),
}


# --- a small Dockerfile parser ------------------------------------------------------------


@dataclass
class Instruction:
    keyword: str
    args: str
    line: int


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)


def parse_dockerfile(text: str) -> tuple[dict[str, str], list[Stage]]:
    """(global ARG defaults, stages). Joins `\\` continuations; drops comments."""
    instructions: list[Instruction] = []
    pending = ""
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # comment lines inside a continuation are ignored by Docker
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = pending + stripped
        pending = ""
        keyword, _, args = full.partition(" ")
        instructions.append(Instruction(keyword.upper(), args.strip(), start))
    assert not pending, "Dockerfile ends inside a line continuation"

    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for ins in instructions:
        if ins.keyword == "ARG" and not stages:
            key, _, default = ins.args.partition("=")
            global_args[key] = default
        elif ins.keyword == "FROM":
            words = ins.args.split()
            words = [w for w in words if not w.startswith("--platform")]
            base = re.sub(r"\$\{?(\w+)\}?", lambda m: global_args.get(m.group(1), m.group(0)),
                          words[0])
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            stages.append(Stage(base, name))
        else:
            assert stages, f"line {ins.line}: {ins.keyword} before FROM"
            stages[-1].instructions.append(ins)
    return global_args, stages


def exec_form(ins: Instruction) -> list[str]:
    value = json.loads(ins.args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), (
        f"line {ins.line}: {ins.keyword} must use the exec form (a JSON list of strings), "
        "so signals reach the process"
    )
    return value


def copy_sources(ins: Instruction) -> list[str] | None:
    """Sources of a COPY/ADD from the build context; None for COPY --from=<stage>."""
    words = ins.args.split()
    flags = [w for w in words if w.startswith("--")]
    if any(f.startswith("--from") for f in flags):
        return None
    paths = [w for w in words if not w.startswith("--")]
    assert len(paths) >= 2, f"line {ins.line}: COPY needs a source and a destination"
    return paths[:-1]


def glob_regex(pattern: str) -> str:
    """A .dockerignore pattern as a regex: `**` spans directories, `*` and `?` do not."""
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return "".join(out)


def dockerignore_excludes(patterns: list[str], path: str) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents wins."""
    parts = path.strip("/").split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for raw in patterns:
        negate = raw.startswith("!")
        regex = glob_regex((raw[1:] if negate else raw).strip("/"))
        if any(re.fullmatch(regex, c) for c in candidates):
            excluded = not negate
    return excluded


def load(image: str) -> tuple[Path, list[Stage]]:
    dockerfile = ROOT / IMAGES[image][0]
    assert dockerfile.is_file(), f"{dockerfile.name} is missing"
    return dockerfile, parse_dockerfile(dockerfile.read_text())[1]


def dockerignore_patterns() -> list[str]:
    path = ROOT / ".dockerignore"
    assert path.is_file(), ".dockerignore is missing: the build context would carry .venv and .git"
    return [
        line.strip() for line in path.read_text().splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]


# --- static checks ----------------------------------------------------------------------


def test_dockerignore_matcher_follows_docker_rules() -> None:
    patterns = ["*", "!operator/", "**/__pycache__"]
    assert dockerignore_excludes(patterns, ".venv/bin/python")
    assert not dockerignore_excludes(patterns, "operator/elastic_operator/cli.py")
    assert dockerignore_excludes(patterns, "operator/elastic_operator/__pycache__/cli.pyc")


@pytest.mark.parametrize("image", sorted(IMAGES))
def test_every_copied_file_exists_and_reaches_the_build_context(image: str) -> None:
    dockerfile, stages = load(image)
    patterns = dockerignore_patterns()
    copied = []
    for stage in stages:
        for ins in stage.instructions:
            if ins.keyword not in ("COPY", "ADD"):
                continue
            sources = copy_sources(ins)
            if sources is None:
                continue
            for source in sources:
                path = ROOT / source
                assert path.exists(), (
                    f"{dockerfile.name}:{ins.line} copies {source}, which does not exist")
                files = [path] if path.is_file() else [p for p in path.rglob("*.py")]
                assert files, f"{dockerfile.name}:{ins.line}: {source} holds no Python files"
                for f in files:
                    rel = f.relative_to(ROOT).as_posix()
                    assert not dockerignore_excludes(patterns, rel), (
                        f"{dockerfile.name}:{ins.line} copies {rel}, but .dockerignore excludes it"
                    )
                copied.append(source)
    # The install needs the metadata, the shared API and the image's own package; the
    # other runtime package and the dev tools must stay out of the image.
    own = {"operator": "operator", "trainer": "trainer"}[image]
    for needed in ("pyproject.toml", "api", own, PYPROJECT["project"]["readme"]):
        assert needed in copied, f"{dockerfile.name} never copies {needed}, which the install needs"
    for unwanted in ({"operator", "trainer"} - {own}) | {"devtools"}:
        assert unwanted not in copied, f"{dockerfile.name} copies {unwanted}, which it never runs"


@pytest.mark.parametrize("image", sorted(IMAGES))
def test_runs_as_a_numeric_non_root_user_created_in_the_final_stage(image: str) -> None:
    dockerfile, stages = load(image)
    final = stages[-1]
    users = [ins for ins in final.instructions if ins.keyword == "USER"]
    assert users, f"{dockerfile.name}: the final stage has no USER, so it runs as root"
    user = users[-1].args.split(":")[0]
    assert user.isdigit(), (
        f"{dockerfile.name}: USER {user} must be numeric, or Kubernetes cannot verify runAsNonRoot"
    )
    assert int(user) != 0, f"{dockerfile.name}: USER is root"
    runs = " ".join(ins.args for ins in final.instructions if ins.keyword == "RUN")
    assert re.search(rf"useradd\b[^&]*--uid {user}\b", runs), (
        f"{dockerfile.name}: uid {user} is never created in the final stage"
    )
    env = " ".join(ins.args for ins in final.instructions if ins.keyword == "ENV")
    # kopf calls getpass.getuser(): without $USER it needs a passwd entry for the uid, and
    # a pod may run under another uid than the image's (runAsUser).
    assert re.search(r"\bUSER=\w", env), f"{dockerfile.name}: ENV does not set USER"
    assert re.search(r"\bHOME=/tmp\b", env), f"{dockerfile.name}: HOME must be writable (/tmp)"
    later = final.instructions[final.instructions.index(users[-1]) + 1:]
    assert not [i for i in later if i.keyword == "RUN"], (
        f"{dockerfile.name}: RUN after USER would need root-owned paths to be writable"
    )


# Where the images' libraries write (caches, configs): the root filesystem is read-only
# (chart and renderer), so each must be under /tmp, the emptyDir. The trainer's imports
# need XDG_CACHE_HOME (jax, orbax) and MPLCONFIGDIR (matplotlib) too.
WRITABLE_ENV = ("HOME", "TMPDIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME",
                "XDG_STATE_HOME", "MPLCONFIGDIR")
REQUIRED_WRITABLE_ENV = {"operator": {"HOME"},
                         "trainer": {"HOME", "XDG_CACHE_HOME", "MPLCONFIGDIR"}}


@pytest.mark.parametrize("image", sorted(IMAGES))
def test_every_place_the_image_writes_is_under_tmp(image: str) -> None:
    dockerfile, stages = load(image)
    env = dict(re.findall(r"\b(\w+)=(\S+)", " ".join(
        ins.args for ins in stages[-1].instructions if ins.keyword == "ENV")))
    missing = REQUIRED_WRITABLE_ENV[image] - env.keys()
    assert not missing, f"{dockerfile.name}: ENV must set {sorted(missing)} under /tmp"
    for key in WRITABLE_ENV:
        if key in env:
            assert env[key] == "/tmp" or env[key].startswith("/tmp/"), (
                f"{dockerfile.name}: {key}={env[key]} is on the read-only root filesystem; "
                "only /tmp (an emptyDir) is writable")
    assert env.get("PYTHONDONTWRITEBYTECODE") == "1", (
        f"{dockerfile.name}: Python would try to write .pyc files next to the code")


def test_trainer_default_compilation_cache_is_where_the_pod_can_write() -> None:
    import argparse

    from elastic_trainer.train_cli import _compilation_cache_dir

    def default(checkpoint_dir: str) -> str:
        return _compilation_cache_dir(
            argparse.Namespace(compilation_cache=None, checkpoint_dir=checkpoint_dir))

    # A filesystem checkpoint directory is written anyway; a bucket's goes to /tmp.
    assert default("/tmp/run/ckpt") == "/tmp/run/ckpt/compilation-cache"
    assert default("gs://bucket/ckpt").startswith("/tmp/")


@pytest.mark.parametrize("image", sorted(IMAGES))
def test_base_image_is_pinned_and_matches_requires_python(image: str) -> None:
    dockerfile, stages = load(image)
    requires = PYPROJECT["project"]["requires-python"]
    minimum = re.fullmatch(r">=\s*(\d+)\.(\d+)", requires)
    assert minimum, f"unexpected requires-python {requires!r}"
    for stage in stages:
        match = re.fullmatch(
            r"python:(\d+)\.(\d+)\.(\d+)-slim-(bookworm|trixie)@sha256:[0-9a-f]{64}", stage.base)
        assert match, (
            f"{dockerfile.name}: base {stage.base!r} is not pinned to an exact "
            "python:X.Y.Z-slim-<debian> tag and its @sha256: digest"
        )
        assert (int(match[1]), int(match[2])) >= (int(minimum[1]), int(minimum[2]))
    assert len({s.base for s in stages}) == 1, "build and runtime stages use different bases"


def installed_extras(stages: list[Stage]) -> list[str]:
    found = []
    for stage in stages:
        for ins in stage.instructions:
            if ins.keyword == "RUN":
                found += re.findall(r"pip install[^&]*?[\"']?\.\[([\w,-]+)\][\"']?", ins.args)
    return found


@pytest.mark.parametrize("image", sorted(IMAGES))
def test_installs_exactly_its_extra_and_its_dependencies_by_hash(image: str) -> None:
    dockerfile, stages = load(image)
    _, extra, _ = IMAGES[image]
    assert installed_extras(stages) == [extra], (
        f"{dockerfile.name} must install the package with exactly '.[{extra}]'"
    )
    assert extra in PYPROJECT["project"]["optional-dependencies"]
    assert lock.IMAGES[image] == extra, "hack/lock.py locks another extra than the image installs"
    build = stages[0].instructions
    copies = " ".join(i.args for i in build if i.keyword == "COPY")
    assert f"requirements/{image}.lock" in copies.split(), (
        f"{dockerfile.name} never copies requirements/{image}.lock")
    runs = [i.args for i in build if i.keyword == "RUN"]
    by_hash = rf"pip install --no-compile --require-hashes --no-deps -r {image}\.lock\b"
    locked = [r for r in runs if re.search(by_hash, r)]
    assert locked, f"{dockerfile.name}: dependencies not installed from the lock by hash"
    # Everything else pip installs in the image is the project itself, without its deps.
    for run in runs:
        for install in re.findall(r"pip install[^&]*", run):
            assert "--no-deps" in install, f"{dockerfile.name}: `{install}` resolves on its own"
    project = [r for r in runs if installed_extras([Stage("", None, [Instruction("RUN", r, 0)])])]
    assert runs.index(locked[0]) < runs.index(project[0]) and "pip check" in project[0], (
        f"{dockerfile.name}: `pip check` must run once the project is installed")


def base_check(stages: list[Stage]) -> Instruction:
    """The build stage's first RUN: it refuses a base without a digest."""
    build = stages[0].instructions
    runs = [i for i in build if i.keyword == "RUN"]
    assert runs and "ALLOW_UNPINNED_BASE" in runs[0].args, "the first RUN must check the base"
    args = [i.args for i in build[:build.index(runs[0])] if i.keyword == "ARG"]
    assert "PYTHON_IMAGE" in args and "ALLOW_UNPINNED_BASE=0" in args, args
    return runs[0]


@pytest.mark.parametrize("image", sorted(IMAGES))
def test_every_stage_is_from_the_base_argument_whose_digest_is_checked(image: str) -> None:
    dockerfile = ROOT / IMAGES[image][0]
    froms = re.findall(r"^FROM\s+(\S+)", dockerfile.read_text(), re.M)
    assert froms and set(froms) == {"${PYTHON_IMAGE}"}, (
        f"{dockerfile.name}: every stage must be FROM ${{PYTHON_IMAGE}}, got {froms}")
    check = base_check(parse_dockerfile(dockerfile.read_text())[1])

    def build_with(base: str, allow: str = "0") -> subprocess.CompletedProcess[str]:
        return subprocess.run(["sh", "-c", check.args], capture_output=True, text=True,
                              env={"PATH": "/usr/bin:/bin", "PYTHON_IMAGE": base,
                                   "ALLOW_UNPINNED_BASE": allow}, timeout=30)

    digest = "sha256:" + "0" * 64
    assert build_with(f"python:3.11.14-slim-bookworm@{digest}").returncode == 0
    assert build_with(f"registry.example/python@{digest}").returncode == 0
    refused = build_with("python:3.11.14-slim-bookworm")
    assert refused.returncode != 0
    assert "PYTHON_IMAGE=python:3.11.14-slim-bookworm has no @sha256: digest" in refused.stderr
    assert "ALLOW_UNPINNED_BASE=1" in refused.stderr, "the refusal must name the way out"
    assert build_with(f"python:3.11@{digest[:-1]}").returncode != 0, "a cut digest passed"
    assert build_with("etj-local/debian-python:bookworm", allow="1").returncode == 0


def test_the_public_base_of_the_e2e_is_the_dockerfiles_and_only_it_may_skip_the_digest() -> None:
    defaults = {parse_dockerfile((ROOT / f).read_text())[0]["PYTHON_IMAGE"]
                for f, _, _ in IMAGES.values()}
    versions = (ROOT / "devtools/elastic_devtools/localcluster/versions.env").read_text()
    public = re.search(r"^PYTHON_IMAGE_PUBLIC=(\S+)$", versions, re.M)
    assert public and defaults == {public[1]}, (defaults, public)
    # Only make e2e-kind's build passes the flag, and sets it from the base it was given.
    passing = [p.relative_to(ROOT).as_posix() for p in
               [ROOT / "Makefile", *(ROOT / "hack").rglob("*"), *(ROOT / ".ci").rglob("*")]
               if p.is_file() and "ALLOW_UNPINNED_BASE" in p.read_text(errors="replace")]
    assert passing == ["hack/kind/app-images.sh"], passing
    script = (ROOT / "hack/kind/app-images.sh").read_text()
    assert '--build-arg ALLOW_UNPINNED_BASE="$unpinned"' in script
    assert "case $PYTHON_BASE in *@sha256:*) ;; *) unpinned=1 ;; esac" in script


@pytest.mark.parametrize("image", sorted(IMAGES))
def test_entrypoint_is_the_etj_subcommand(image: str) -> None:
    dockerfile, stages = load(image)
    _, _, subcommand = IMAGES[image]
    entrypoints = [i for i in stages[-1].instructions if i.keyword == "ENTRYPOINT"]
    assert entrypoints, f"{dockerfile.name}: no ENTRYPOINT"
    argv = exec_form(entrypoints[-1])
    assert argv[:2] == ["etj", subcommand], f"{dockerfile.name}: ENTRYPOINT {argv}"
    assert "etj" in PYPROJECT["project"]["scripts"], "pyproject.toml no longer defines `etj`"
    for ins in stages[-1].instructions:
        if ins.keyword == "CMD":
            exec_form(ins)


# --- the entrypoint works with only that extra installed ----------------------------------


def dependency_closure(extra: str) -> set[str]:
    """Canonical names of the distributions a plain `pip install .[extra]` brings."""
    wanted: list[tuple[str, frozenset[str]]] = [(PROJECT_NAME, frozenset({extra}))]
    seen: set[tuple[str, frozenset[str]]] = set()
    names: set[str] = set()
    while wanted:
        name, extras = wanted.pop()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        names.add(canonicalize_name(name))
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # an optional platform dependency that is not installed here
        for line in dist.requires or []:
            req = Requirement(line)
            envs = [{"extra": e} for e in extras] or [{"extra": ""}]
            if req.marker is None or any(req.marker.evaluate(env) for env in envs):
                wanted.append((req.name, frozenset(req.extras)))
    return names


def blocked_top_level_modules(extra: str) -> list[str]:
    allowed = dependency_closure(extra)
    blocked = []
    for top, dists in metadata.packages_distributions().items():
        if top in sys.stdlib_module_names or top.startswith("_") or not top.isidentifier():
            continue
        if not any(canonicalize_name(d) in allowed for d in dists):
            blocked.append(top)
    return sorted(blocked)


def lazy_imports(module_name: str) -> list[str]:
    """Modules a subcommand imports inside functions (etj_cli.py asks for heavy imports there)."""
    spec = __import__("importlib.util").util.find_spec(module_name)
    assert spec is not None and spec.origin, f"cannot find {module_name}"
    tree = ast.parse(Path(spec.origin).read_text())
    package = module_name.rpartition(".")[0]
    found = []
    for func in ast.walk(tree):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(func):
            if isinstance(node, ast.Import):
                found += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    found.append(f"{base}.{node.module}" if node.module else base)
                elif node.module:
                    found.append(node.module)
    return sorted(set(found))


BLOCKED_RUNNER = textwrap.dedent("""
    import importlib, importlib.abc, json, sys
    blocked = set(json.loads(sys.argv[1]))

    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in blocked:
                raise ModuleNotFoundError(
                    f"No module named {name!r} (not installed by this image's extra)", name=name)
            return None

    sys.meta_path.insert(0, Blocker())
    mode, payload = sys.argv[2], json.loads(sys.argv[3])
    if mode == "import":
        for module in payload:
            importlib.import_module(module)
        print("imported", len(payload))
    else:
        from elastic_api.etj_cli import main
        sys.argv = ["etj", *payload]
        sys.exit(main(payload))
""")


def run_blocked(extra: str, mode: str, payload: list[str]) -> subprocess.CompletedProcess[str]:
    blocked = blocked_top_level_modules(extra)
    return subprocess.run(
        [sys.executable, "-c", BLOCKED_RUNNER, json.dumps(blocked), mode, json.dumps(payload)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )


def test_blocker_hides_what_the_extra_does_not_bring() -> None:
    # jax comes only with the trainer extra, kopf only with the operator extra.
    assert "jax" in blocked_top_level_modules("operator")
    assert "kopf" not in blocked_top_level_modules("operator")
    assert "kopf" in blocked_top_level_modules("trainer")
    assert "jax" not in blocked_top_level_modules("trainer")
    result = run_blocked("operator", "import", ["jax"])
    assert result.returncode != 0 and "not installed by this image's extra" in result.stderr


def trainer_image_subcommands() -> set[str]:
    """The `etj` subcommands the renderer runs from a job's trainer image (every example)."""
    import yaml

    from elastic_api.models import ElasticTrainingJob
    from elastic_operator.render import render

    found = set()
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "ElasticTrainingJob":
                continue
            job = ElasticTrainingJob.model_validate(doc)
            if job.spec.trainer.command is not None:
                continue  # the user's own program and image (maxtext.yaml), not ours
            for obj in render(job):
                for container in _containers(obj):
                    if container.get("image") == job.spec.trainer.image:
                        command = container.get("command") or []
                        assert command[:1] == ["etj"], (path.name, container["name"], command)
                        found.add(command[1])
    return found


def _containers(obj: Any) -> list[dict[str, Any]]:
    found = []
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                found += [c for c in value if isinstance(c, dict)]
            else:
                found += _containers(value)
    elif isinstance(obj, list):
        for item in obj:
            found += _containers(item)
    return found


def test_trainer_image_runs_train_and_the_slice_agent() -> None:
    assert trainer_image_subcommands() == {"train", "slice-agent"}


def image_subcommands() -> list[tuple[str, str]]:
    pairs = [(image, sub) for image, (_, _, sub) in IMAGES.items()]
    pairs += [("trainer", sub) for sub in ("slice-agent",)]
    return sorted(set(pairs))


@pytest.mark.parametrize(("image", "subcommand"), image_subcommands())
def test_every_command_of_the_image_exists_after_installing_only_its_extra(
    image: str, subcommand: str,
) -> None:
    _, extra, _ = IMAGES[image]
    listing = run_blocked(extra, "cli", ["--help"])
    assert listing.returncode == 0, f"`etj --help` fails with only [{extra}]:\n{listing.stderr}"
    assert re.search(rf"^\s+{re.escape(subcommand)}\s", listing.stdout, re.M), (
        f"`etj --help` with only [{extra}] installed does not list `{subcommand}` "
        f"(its module is missing or fails to import):\n{listing.stdout}"
    )
    help_run = run_blocked(extra, "cli", [subcommand, "--help"])
    assert help_run.returncode == 0, f"`etj {subcommand} --help` fails:\n{help_run.stderr}"

    from elastic_api.etj_cli import SUBCOMMANDS

    module_name = SUBCOMMANDS[subcommand][0]
    heavy = lazy_imports(module_name)
    imported = run_blocked(extra, "import", [module_name, *heavy])
    assert imported.returncode == 0, (
        f"`etj {subcommand}` imports {heavy} when it runs; with only [{extra}] installed "
        f"that fails:\n{imported.stderr[-3000:]}"
    )
