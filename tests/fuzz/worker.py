"""Runs programs in a child process, so that a segfault or a hang is a result instead of the end of a run.

    with Worker(triton=False) as w:
        res = w.run(src, timeout=180)     # runner.run's dict; status "segv" or "hang" when the child died
                                          # ("invalid" where eager alone dies too: torch's own crash)

The child is a fresh interpreter (spawn) set up by runner.setup_process before it imports graphjit (the
Triton interpreter must be chosen then); it is replaced after a death, a hang, or RECYCLE programs.
"""
import concurrent.futures
import multiprocessing
import traceback

from . import runner

RECYCLE = 150       # programs per child: compiled kernels and caches of earlier programs accumulate


class Worker:
    def __init__(self, triton=False, knobs=None):
        self.triton = triton
        self.knobs = dict(knobs or {})      # graphjit.config settings the child runs its programs with
        self.proc = self.conn = None
        self.served = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def run(self, src, timeout=180, **options):
        """runner.run(src, **options) in the child."""
        if self.proc is None or not self.proc.is_alive() or self.served >= RECYCLE:
            self.close()
            self._start()
        self.served += 1
        self.conn.send((src, options))
        if not self.conn.poll(timeout):
            self.proc.kill()
            self.close()
            return {"status": "hang", "msg": f"no result after {timeout} s"}
        try:
            res = self.conn.recv()
        except (EOFError, ConnectionError):
            self.proc.join(5)
            code = self.proc.exitcode
            self.close()
            if not options.get("eager_only") and self._eager_dies(src, timeout, options):
                return {"status": "invalid",
                        "msg": f"eager alone dies too (exit code {code}): a crash of torch's, not a test"}
            return {"status": "segv", "msg": f"the worker process died (exit code {code})"}
        if res["status"] == "setup_error":
            self.close()
            raise SetupError("the fuzz worker could not start:\n" + res["msg"])
        return res

    def _eager_dies(self, src, timeout, options):
        """Whether the program's eager half alone (runner.run_eager, in a fresh child) kills its process."""
        res = self.run(src, timeout, eager_only=True, grad=options.get("grad", False))
        return res["status"] in ("segv", "hang")

    def _start(self):
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, self.triton, self.knobs), daemon=True)
        self.proc.start()
        child.close()
        self.served = 0

    def close(self):
        """Ends the child: it exits when its end of the pipe closes (killed if it does not, e.g. hung)."""
        if self.proc is not None:
            self.conn.close()
            self.proc.join(10)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join(5)
        self.proc = self.conn = None


class Maker:
    """Generates programs in a child process of its own: the generator runs eager ops to choose statements
    (the --grad probe runs backward), and where torch itself dies on one, that program is skipped (None)
    instead of the run ending.

        with Maker() as make:
            prog = make("tensor", seed, triton=False, grad=True)     # a Program, or None: the child died
    """

    def __init__(self):
        self.pool = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __call__(self, mode, seed, triton, dynamic=False, grad=False, float_args=False):
        if self.pool is None:
            self.pool = concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        try:
            return self.pool.submit(make, mode, seed, triton, dynamic, grad, float_args).result()
        except concurrent.futures.process.BrokenProcessPool:
            self.close()
            return None

    def close(self):
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)
        self.pool = None


def make(mode, seed, triton, dynamic=False, grad=False, float_args=False):
    """Program `seed` of the given mode (python: pyprog's; tensor: generator's)."""
    from . import generator, pyprog
    prog = pyprog.generate(seed) if mode == "python" else \
        generator.generate(seed, triton=triton, float_args=float_args, grad=grad)
    if dynamic:
        prog.dynamic = True
    prog.grad = grad
    return prog


class SetupError(RuntimeError):
    """The child could not set itself up (e.g. graphjit or a dependency does not import): no program can
    run, so the fuzz run stops instead of counting every program as a crash."""


def _serve(conn, triton, knobs=None):
    try:
        runner.setup_process(triton)
        from graphjit import config
        for name, value in (knobs or {}).items():
            setattr(config, name, value)
    except BaseException:  # noqa: BLE001 - sent to the parent, which raises it
        conn.recv()
        conn.send({"status": "setup_error", "msg": traceback.format_exc()[-3000:]})
        return
    while True:
        try:
            src, options = conn.recv()
        except EOFError:
            return
        try:
            if options.pop("eager_only", False):
                res = runner.run_eager(src, **options)
            else:
                res = runner.run(src, **options)
        except Exception:  # noqa: BLE001 - a bug of the fuzzer itself, reported as such
            res = {"status": "harness_error", "msg": traceback.format_exc()[-3000:]}
        res.pop("states", None)
        conn.send(res)
