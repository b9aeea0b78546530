"""Real runs of ``hscale quantize`` that a test kills at chosen moments, each forked from one
server process that imported the kit once: every moment of a run is then the run's own work
(no interpreter start-up or imports inside the window a kill is drawn from), and a dozen runs
cost a dozen runs, not a dozen imports of torch.

The server is this module run as a script (``python -m helpers.runs MODEL_DIR``): it imports
the kit and quantizes the model once, then reads commands from stdin, one a line: ``start MODEL_DIR OUT`` (tab-separated) forks a
child that quantizes with RTN and exits (0 on success, 1 on an error) and answers its pid;
``wait PID`` reaps that child and answers its exit status (minus the signal that ended it). It
never runs torch itself, so nothing it forks inherits a thread pool.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


def serve(warm_up_model: str) -> None:
    """Serve runs of the model ``warm_up_model``, after quantizing it once here (in one torch
    thread, so that no thread pool exists to be forked) so that every import a run makes
    lazily is made before the first fork."""
    import tempfile

    import torch
    from hscale.quantize import quantize_model
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as warm:
        quantize_model(model_dir=warm_up_model, out=str(Path(warm) / "out"), method="rtn",
                       progress=False)
    print("ready", flush=True)
    for line in sys.stdin:
        command, *args = line.rstrip("\n").split("\t")
        if command == "wait":
            _, status = os.waitpid(int(args[0]), 0)
            print(os.waitstatus_to_exitcode(status), flush=True)
            continue
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                quantize_model(model_dir=args[0], out=args[1], method="rtn", progress=False,
                               force=True)
                code = 0
            finally:
                os._exit(code)
        print(pid, flush=True)


class QuantizeServer:
    """``with QuantizeServer(model_dir) as server: pid = server.start(model_dir, out)``, then
    ``server.kill(pid)`` at the moment chosen, or ``server.wait(pid)`` for its exit status."""

    def __init__(self, warm_up_model):
        self.warm_up_model = str(warm_up_model)

    def __enter__(self):
        tests = str(Path(__file__).resolve().parent.parent)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            filter(None, [tests, os.environ.get("PYTHONPATH")])))
        self.process = subprocess.Popen([sys.executable, "-m", "helpers.runs",
                                         self.warm_up_model], env=env,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True)
        assert self.process.stdout.readline().strip() == "ready"
        return self

    def _ask(self, *words) -> int:
        self.process.stdin.write("\t".join(map(str, words)) + "\n")
        self.process.stdin.flush()
        return int(self.process.stdout.readline())

    def start(self, model_dir, out) -> int:
        return self._ask("start", model_dir, out)

    def wait(self, pid: int) -> int:
        return self._ask("wait", pid)

    def kill(self, pid: int) -> int:
        os.kill(pid, signal.SIGKILL)
        return self.wait(pid)

    def __exit__(self, *exc):
        self.process.stdin.close()
        self.process.wait(timeout=60)


if __name__ == "__main__":
    serve(sys.argv[1])
