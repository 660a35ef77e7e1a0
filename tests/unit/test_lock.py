"""requirements/<image>.lock: what each image installs with `pip install --require-hashes`.

Offline: the set of packages and their versions is recomputed from pyproject.toml,
constraints.txt and the virtualenv's metadata (hack/lock.py), and must equal the committed
lock, so a dependency or pin changed without `make lock` fails here. The hashes themselves
come from the index; `make lock` fetches them, these tests check that every entry has them.
"""
from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

from hack import lock

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = (ROOT / "pyproject.toml").read_text()
CONSTRAINTS = (ROOT / "constraints.txt").read_text()


def committed(image: str) -> str:
    path = lock.LOCKS / f"{image}.lock"
    assert path.is_file(), f"{path.relative_to(ROOT)} is missing: run `{lock.REGENERATE}`"
    return path.read_text()


@pytest.mark.parametrize("image", sorted(lock.IMAGES))
def test_each_lock_is_what_its_image_installs_at_the_pinned_versions(image: str) -> None:
    differences = lock.stale(committed(image), lock.pins(lock.IMAGES[image]))
    assert differences == [], (
        f"requirements/{image}.lock is stale (pyproject.toml or constraints.txt changed): "
        f"run `{lock.REGENERATE}`:\n" + "\n".join(differences))


@pytest.mark.parametrize("image", sorted(lock.IMAGES))
def test_every_entry_is_pinned_by_version_and_hash(image: str) -> None:
    entries = lock.parse_lock(committed(image))  # refuses a line without a hash
    assert entries, f"requirements/{image}.lock lists nothing"
    constraints = lock.read_constraints(CONSTRAINTS)
    for key, (version, digests) in entries.items():
        assert digests, key
        assert constraints[key][1] == version, (key, version, constraints[key])


def test_the_trainer_lock_holds_the_heavy_native_wheels_for_linux_only() -> None:
    """jaxlib and numpy ship a wheel per platform and Python: only cp311 Linux x86_64 ones
    are listed (a macOS or cp312 hash would let no other file in, but says the wrong thing)."""
    entries = lock.parse_lock(committed("trainer"))
    for key in ("jax", "jaxlib", "numpy", "py-spy"):
        assert key in entries, f"the trainer image installs {key}"
    assert "kopf" not in entries and "kopf" in lock.parse_lock(committed("operator"))
    assert "jax" not in lock.parse_lock(committed("operator"))


def test_a_dependency_added_without_make_lock_is_found_stale() -> None:
    # matplotlib (installed for the cli extra) added to [trainer] in pyproject.toml.
    changed = PYPROJECT.replace('trainer = [\n', 'trainer = [\n    "matplotlib==3.11.2",\n', 1)
    assert changed != PYPROJECT
    differences = lock.stale(committed("trainer"), lock.pins("trainer", pyproject_text=changed))
    assert any(d.startswith("matplotlib: not in the lock") for d in differences), differences
    assert any(d.startswith("contourpy: not in the lock") for d in differences), differences


def test_a_pin_moved_without_make_venv_and_make_lock_is_refused() -> None:
    changed = re.sub(r"^absl-py==\S+$", "absl-py==9.9.9", CONSTRAINTS, count=1, flags=re.M)
    assert changed != CONSTRAINTS
    with pytest.raises(lock.LockError, match="make venv"):
        lock.pins("trainer", constraints_text=changed)


# --- the walk over the metadata, on made-up packages --------------------------------------

FAKE_REQUIRES = {
    "a": ["b; sys_platform == 'win32'", "c[x]>=1", "d; python_version < '3.11'"],
    "c": ["e; extra == 'x'", "f; extra == 'y'"],
    "e": [],
}
FAKE_PINS = {k: (k, "1.0") for k in "abcdef"}


def test_the_walk_follows_extras_and_the_targets_markers_only() -> None:
    found = lock.closure([Requirement("a")], FAKE_PINS, FAKE_REQUIRES.__getitem__)
    assert sorted(found) == ["a", "c", "e"]


def test_an_unpinned_dependency_is_named() -> None:
    pins = {k: v for k, v in FAKE_PINS.items() if k != "e"}
    with pytest.raises(lock.LockError, match=r"e \(needed by c==1.0\) is not pinned"):
        lock.closure([Requirement("a")], pins, FAKE_REQUIRES.__getitem__)


def test_a_pin_outside_what_a_dependency_accepts_is_named() -> None:
    pins = {**FAKE_PINS, "c": ("c", "0.5")}
    with pytest.raises(lock.LockError, match=r"needs c\[x\]>=1, but constraints.txt pins c==0.5"):
        lock.closure([Requirement("a")], pins, FAKE_REQUIRES.__getitem__)


# --- which files' hashes are listed ---------------------------------------------------------


def fake_file(name: str) -> dict[str, Any]:
    return {"filename": name, "hashes": {"sha256": hashlib.sha256(name.encode()).hexdigest()}}


def test_only_files_a_linux_cpython_311_install_can_pick_are_hashed() -> None:
    files = [fake_file(n) for n in (
        "np-2.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
        "np-2.0-cp311-cp311-manylinux_2_28_x86_64.whl",
        "np-2.0-cp311-cp311-macosx_14_0_arm64.whl",
        "np-2.0-cp312-cp312-manylinux_2_28_x86_64.whl",
        "np-2.0-cp311-cp311-manylinux_2_28_aarch64.whl",
        "np-2.0-cp311-cp311-musllinux_1_2_x86_64.whl",
        "np-1.9-cp311-cp311-manylinux_2_28_x86_64.whl",
        "np-2.0.tar.gz",
    )]
    picked = lock.select_hashes(files, "np", "2.0")
    assert picked == sorted(f["hashes"]["sha256"] for f in files[:2])


def test_an_sdist_is_hashed_only_where_no_wheel_fits() -> None:
    files = [fake_file("pure-1.0.tar.gz"), fake_file("pure-1.0-py2-none-any.whl")]
    assert lock.select_hashes(files, "pure", "1.0") == [files[0]["hashes"]["sha256"]]
    with pytest.raises(lock.LockError, match=r"no file of pure==2\.0"):
        lock.select_hashes(files, "pure", "2.0")


def test_a_lock_line_without_a_hash_is_refused() -> None:
    with pytest.raises(lock.LockError, match="name==version --hash"):
        lock.parse_lock("absl-py==2.5.1\n")
    with pytest.raises(lock.LockError, match="not a sha256"):
        lock.parse_lock("absl-py==2.5.1 \\\n    --hash=sha256:abc\n")
