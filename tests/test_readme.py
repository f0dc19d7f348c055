"""The README is run, not just read: its set-up commands, its five-minute walk-through and its
Python examples; and nothing in the project points outside the repository."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def section(title: str) -> str:
    start = README.index(f"## {title}")
    end = README.find("\n## ", start + 1)
    return README[start:end if end >= 0 else None]


def blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def test_the_readme_starts_with_exactly_the_two_setup_commands():
    first = blocks(README, "bash")[0].strip().splitlines()
    assert README.index("```bash") < README.index("\n## ")
    assert first == ['pip install -e . && gradir run samples/lstm_bptt.gir',
                     'pip install -e ".[test]" && python -m pytest']
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'pip install --quiet -e ".[test]" && python -m pytest' in ci


def _bin() -> str:
    return os.path.dirname(sys.executable)


def test_the_walk_through_runs_line_by_line(tmp_path):
    """Every command of "Five minutes with gradir", in a fresh directory, as a user types them."""
    text = section("Five minutes with gradir")
    script = "\n".join(blocks(text, "bash"))
    assert "gradir gradcheck tiny.gir" in script and "gradir grad tiny.gir" in script
    env = dict(os.environ, PATH=_bin() + os.pathsep + os.environ.get("PATH", ""))
    has_dot = shutil.which("dot") is not None
    # run each command on its own (a heredoc is one command), so a failure names its line
    commands, buf = [], []
    for line in script.splitlines():
        buf.append(line)
        if buf[0].startswith("cat >") and line != "EOF":
            continue
        commands.append("\n".join(buf))
        buf = []
    ran = 0
    for cmd in commands:
        if not cmd.strip():
            continue
        if cmd.startswith("cd "):
            continue  # every command runs in tmp_path, a fresh directory
        r = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=300)
        if cmd == "gradir check bad.gir":
            assert r.returncode == 1 and "unknown op 'Tahn'" in r.stderr
            continue
        if "--svg" in cmd and not has_dot:
            assert r.returncode == 1 and "apt-get install graphviz" in r.stderr, r.stderr
            print(f"skipped rendering (Graphviz's dot is not installed): {cmd}")
            continue
        assert r.returncode == 0, f"{cmd}\n{r.stdout}\n{r.stderr}"
        assert "Traceback" not in r.stderr
        ran += 1
    assert ran >= 8
    assert (tmp_path / "tiny.grad.gir").exists() and (tmp_path / "tiny.grad.dot").exists()
    # the error shown in the walk-through is the one gradir prints for that mistake
    shown = re.search(r"\$ gradir check bad.gir\n(.*?)```", text, flags=re.S).group(1)
    assert (tmp_path / "bad.gir").read_text() == (tmp_path / "tiny.gir").read_text().replace("Tanh(", "Tahn(")
    r = subprocess.run(["gradir", "check", "bad.gir"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr == shown


def test_the_python_examples_run():
    text = section("The Python API")
    code = "\n".join(blocks(text, "python"))
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr


def test_relative_links_resolve():
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", doc.read_text(encoding="utf-8")):
            if "://" in target:
                continue
            assert (doc.parent / target).exists(), f"{doc.name} links to {target}, which does not exist"


FORBIDDEN = re.compile(r"\.\./shared|shared/reference|IR_FORMAT\.md|PERFORMANCE\.md|ARCHITECTURE\.md|STYLE\.md"
                       r"|\bOPS\.md|/work/")


def test_nothing_points_outside_the_repository():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout: " + tracked.stderr.strip())
    bad = []
    for name in tracked.stdout.splitlines():
        p = ROOT / name
        if p.suffix not in {".py", ".md", ".lark", ".toml", ".gir", ".txt"} and p.name != "run":
            continue
        if name == "tests/test_readme.py":
            continue
        for k, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if FORBIDDEN.search(line):
                bad.append(f"{name}:{k}: {line.strip()}")
    assert not bad, "\n".join(bad)
