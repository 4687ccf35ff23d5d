"""One owner of a data directory at a time: the server, ``ragdesk ingest``, ``ragdesk
reindex``. A second one is refused with who holds it; a killed holder frees it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from retrieval.data_lock import DataDirBusy, exclusive

ROOT = Path(__file__).resolve().parent.parent


def test_a_second_owner_is_refused_and_told_who_holds_it(tmp_path: Path) -> None:
    with (
        exclusive(tmp_path, "ragdesk serve on port 8000"),
        pytest.raises(DataDirBusy, match="ragdesk serve on port 8000"),
        exclusive(tmp_path, "ragdesk ingest"),
    ):
        pass
    with exclusive(tmp_path, "ragdesk ingest"):  # released when the first one ended
        pass


@pytest.mark.parametrize("command", [["ingest", "--collection", "c"], ["reindex"]])
def test_the_cli_refuses_a_data_dir_in_use(tmp_path: Path, command: list[str]) -> None:
    data_dir = tmp_path / "data"
    args = [sys.executable, "-m", "app.cli", command[0]]
    if command[0] == "ingest":
        args.append(str(tmp_path))
    args += [*command[1:], "--data-dir", str(data_dir)]
    env = {**os.environ, "RAGDESK_EMBEDDER_BACKEND": "fake"}
    with exclusive(data_dir, "ragdesk serve on port 8000"):
        refused = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True)
    assert refused.returncode == 2
    assert "in use by ragdesk serve on port 8000" in refused.stderr


def test_a_killed_holder_frees_the_directory(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom pathlib import Path\n"
            "from retrieval.data_lock import exclusive\n"
            "with exclusive(Path(sys.argv[1]), 'holder'):\n"
            "    print('held', flush=True); time.sleep(60)",
            str(tmp_path),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    with pytest.raises(DataDirBusy), exclusive(tmp_path, "test"):
        pass
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    deadline = time.monotonic() + 5
    while True:
        try:
            with exclusive(tmp_path, "test"):
                return
        except DataDirBusy:
            assert time.monotonic() < deadline, "the lock outlived its holder"
            time.sleep(0.05)
