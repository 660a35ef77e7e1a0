"""Golden files: every example rendered, compared byte for byte; and `etj render` itself."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from elastic_api.etj_cli import main
from hack import golden

REPO = Path(__file__).resolve().parents[2]
REQUIRED = {"article", "v5p", "v6e", "single-slice", "replica-resize", "simulated", "demo"}


def test_examples_cover_the_required_jobs():
    assert set(golden.example_names()) >= REQUIRED


def test_golden_set_matches_examples():
    on_disk = {p.stem for p in (REPO / "tests" / "golden").glob("*.yaml")}
    assert on_disk == set(golden.example_names()), (
        f"tests/golden/ does not match examples/; regenerate with `{golden.REGENERATE}`")


@pytest.mark.parametrize("name", golden.example_names())
def test_golden_is_current(name: str):
    path = REPO / "tests" / "golden" / f"{name}.yaml"
    assert path.exists(), f"missing {path}; run `{golden.REGENERATE}`"
    assert path.read_text() == golden.render_example(name), (
        f"tests/golden/{name}.yaml is stale; review the diff, then regenerate with "
        f"`{golden.REGENERATE}` (or hack/regen-golden)")


def test_demo_is_the_article_shape_on_the_simulated_backend():
    demo = yaml.safe_load((REPO / "examples" / "demo.yaml").read_text())["spec"]
    assert demo["backend"] == "simulated"
    assert demo["tpu"] == {"type": "v5e", "topology": "4x4", "numSlices": 3}
    # Every cadence is the default: the trainer chooses (the demo shows what).
    assert "periodSteps" not in demo["checkpoint"] and "snapshot" not in demo
    assert "overheadBudgetPercent" not in demo
    assert demo["checkpoint"]["directory"].startswith("/tmp/etj-demo/")


def test_etj_render_prints_a_yaml_stream(capsys):
    assert main(["render", "-f", str(REPO / "examples" / "article.yaml"), "-n", "ml"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in docs] == ["Role", "RoleBinding", "JobSet"]
    assert all(d["metadata"]["namespace"] == "ml" for d in docs)


def test_etj_render_names_the_bad_field(tmp_path, capsys):
    bad = yaml.safe_load((REPO / "examples" / "article.yaml").read_text())
    bad["spec"]["tpu"]["topology"] = "3x3"
    bad["spec"]["elastic"]["minSlices"] = 9
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    assert main(["render", "-f", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"etj render: {path} is not a valid ElasticTrainingJob:" in captured.err
    assert "spec.tpu.topology: '3x3' is not a v5e topology; use one of" in captured.err
    assert "spec.elastic.minSlices: must not be more than spec.tpu.numSlices" in captured.err


def test_etj_render_bad_yaml_and_missing_file(tmp_path, capsys):
    path = tmp_path / "x.yaml"
    path.write_text("spec: [unclosed\n")
    assert main(["render", "-f", str(path)]) == 2
    assert "is not valid YAML" in capsys.readouterr().err
    assert main(["render", "-f", str(tmp_path / "nope.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err
