"""qvoice: Qwen3-TTS-12Hz speech synthesis and voice cloning on the CPU, through libqvoice.

The names and return shapes follow the official `qwen_tts` package, so code written for it runs
with the import changed:

    from qvoice import Qwen3TTSModel
    model = Qwen3TTSModel.from_pretrained("models/Qwen3-TTS-12Hz-0.6B-CustomVoice")
    wavs, sr = model.generate_custom_voice("Hello.", speaker="ryan", language="English")

Audio is a list with one mono float32 array per text: numpy.ndarray when numpy is importable,
array.array('f') otherwise. Differences from qwen_tts: the model runs on the CPU (device_map,
dtype and attn_implementation are accepted and ignored); a voice can also be a .qvoice file,
which any model of the same release can speak, not only the Base one; `seed` makes sampling
reproducible; stream_* methods yield audio blocks as they are decoded.
Standard library only; one synthesis at a time per model object.
"""
import array
import base64
import ctypes
import json
import os
import queue
import random
import shutil
import tempfile
import threading
import urllib.parse
import urllib.request
import warnings
import weakref

from . import _capi
from ._capi import SAMPLE_RATE

try:
    import numpy as _np
except ImportError:
    _np = None

__all__ = ["Qwen3TTSModel", "VoiceClonePromptItem", "VoiceClonePrompts", "Voice", "QvoiceError",
           "write_wav", "write_audio", "version", "SAMPLE_RATE"]

# Markup and style keywords (docs/markup.md): qv_synth_request fields, not generation ones.
_STYLE_KWARGS = ("style", "style_strength", "style_table", "strict_markup")

# Official generation keyword -> qv_params field (None: handled apart).
_GEN_KWARGS = {"do_sample": "do_sample", "temperature": "temperature", "top_k": "top_k",
               "top_p": "top_p", "repetition_penalty": "repetition_penalty",
               "subtalker_dosample": "subtalker_do_sample",
               "subtalker_temperature": "subtalker_temperature",
               "subtalker_top_k": "subtalker_top_k", "subtalker_top_p": "subtalker_top_p",
               "max_new_tokens": None, "seed": "seed"}
# from_pretrained keywords of the official (GPU/torch) loader that mean nothing here.
_SEEDS = random.SystemRandom()
_IGNORED_LOAD_KWARGS = {"device_map", "dtype", "torch_dtype", "attn_implementation"}


def _hub_cache(cache_dir=None):
    """The Hugging Face hub cache, as huggingface_hub finds it: cache_dir, $HF_HUB_CACHE,
    $HF_HOME/hub, or ~/.cache/huggingface/hub."""
    if cache_dir:
        return os.fspath(cache_dir)
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "huggingface")
    return os.path.join(home, "hub")


def resolve_model_dir(name_or_path, revision=None, cache_dir=None):
    """A model directory: name_or_path itself when it is one, else the snapshot of hub id
    "Org/Name" in the local Hugging Face cache (models--Org--Name/snapshots/COMMIT, the commit
    read from refs/REVISION, "main" by default, or revision given as a commit). Nothing is
    downloaded: FileNotFoundError names the `hf download` command that would fetch it."""
    path = os.fspath(name_or_path)
    if os.path.isdir(path):
        return path
    parts = path.split("/")
    rev = revision or "main"
    fetch = "hf download %s%s" % (path, " --revision %s" % revision if revision else "")
    if len(parts) != 2 or not all(parts) or path.startswith((".", "~")):
        raise FileNotFoundError("%s: no such model directory, and not a hub id Org/Name "
                                "(download one with: hf download Org/Name --local-dir DIR)" % path)
    repo = os.path.join(_hub_cache(cache_dir), "models--%s--%s" % tuple(parts))
    commit = rev
    ref = os.path.join(repo, "refs", rev)
    if os.path.isfile(ref):
        with open(ref) as f:
            commit = f.read().strip()
    snap = os.path.join(repo, "snapshots", commit)
    if commit and "/" not in commit and os.path.isfile(os.path.join(snap, "config.json")):
        return snap
    raise FileNotFoundError("%s (revision %s): not in the local Hugging Face cache %s; fetch it "
                            "with: %s" % (path, rev, os.path.dirname(repo), fetch))


class QvoiceError(RuntimeError):
    """A libqvoice failure: .status is the QV_E_* name, the message the library's detail line."""

    def __init__(self, status, message):
        self.status = _capi.STATUS[status] if 0 <= status < len(_capi.STATUS) else str(status)
        super().__init__(message or self.status)


class QvoiceValueError(QvoiceError, ValueError):
    """Bad input (unknown speaker or language, invalid or over-limit request)."""


def _raise(status, message=None):
    """Raises the error of a failed call; message defaults to the library's detail line."""
    if message is None:
        message = _capi.lib().last_error(status)
    bad_input = {"QV_E_INVALID", "QV_E_SPEAKER", "QV_E_LANGUAGE", "QV_E_LIMIT", "QV_E_VOCAB"}
    cls = QvoiceValueError if _capi.STATUS[status] in bad_input else QvoiceError
    raise cls(status, message)


def _b(s):
    return None if s is None else os.fsencode(s) if isinstance(s, os.PathLike) else s.encode()


def _s(b):
    return "" if b is None else b.decode("utf-8", "replace")


def version():
    """libqvoice's version string, e.g. "0.1.0"."""
    return _s(_capi.lib().qv_version())


def _block(ptr, n):
    """A copy of n floats at ptr (valid only during the PCM callback)."""
    if _np is not None:
        return _np.ctypeslib.as_array(ptr, shape=(n,)).copy()
    a = array.array("f")
    a.frombytes(ctypes.string_at(ptr, 4 * n))
    return a


def _join(blocks):
    if _np is not None:
        return _np.concatenate(blocks) if blocks else _np.zeros(0, _np.float32)
    a = array.array("f")
    for b in blocks:
        a.extend(b)
    return a


def _free_handles(lib, h):
    # Synthesizer and cloner before the model they use.
    for name, free in (("synth", lib.qv_synth_free), ("cloner", lib.qv_cloner_free),
                       ("model", lib.qv_model_free)):
        if h.get(name) is not None:
            free(h.pop(name))


def _as_list(x, n, what):
    """Official broadcasting: a scalar or one-item list is repeated for n texts."""
    xs = list(x) if isinstance(x, (list, tuple)) else [x]
    if len(xs) == 1 and n > 1:
        xs = xs * n
    if len(xs) != n:
        raise ValueError("Batch size mismatch: text=%d, %s=%d" % (n, what, len(xs)))
    return xs


_WATERMARK_DEFAULT = 0x80000000  # QV_WATERMARK_DEFAULT: synthetic, no voice/model id


def write_audio(path, wav, format=None, loudness=None, watermark=True):
    """Writes mono 24 kHz float samples with libqvoice's encoder (the one speak and the server
    use), atomically: format by name or by path's extension (wav, pcm, flac, ogg, opus, mp3);
    loudness: a target integrated loudness in LUFS (EBU R128, e.g. -23), or None; watermark:
    True marks the samples as synthetic (docs/provenance.md), False writes them as given, an
    int is the 32-bit payload to mark with."""
    lib = _capi.lib()
    path = os.fspath(path)
    fmt = lib.qv_format_parse(_b(format)) if format else lib.qv_format_of_path(_b(path))
    if fmt < 0:
        raise ValueError("%s: unknown format %r (expected wav, pcm, flac, ogg, opus or mp3)"
                         % (path, format or os.path.splitext(path)[1]))
    if _np is not None:  # a copy: loudness scales it in place
        samples = _np.array(wav, dtype=_np.float32).ravel()
        buf = samples.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
    else:
        samples = array.array("f", wav)
        buf = (ctypes.c_float * len(samples)).from_buffer(samples) if len(samples) else None
    n = len(samples)
    if loudness is not None:
        clipped, lufs = ctypes.c_int64(0), ctypes.c_double(0)
        st = lib.qv_loudness_normalize(buf, n, float(loudness), ctypes.byref(clipped),
                                       ctypes.byref(lufs))
        if st:
            _raise(st)
    mark = (_WATERMARK_DEFAULT if watermark is True else 0 if watermark is False
            else int(watermark) & 0xFFFFFFFF)
    st = lib.qv_audio_write(_b(path), fmt, buf, n, mark)
    if st:
        _raise(st)


def write_wav(path, wav, sample_rate=SAMPLE_RATE, watermark=True):
    """Writes mono float samples in [-1, 1] as a 16-bit PCM WAV (write_audio)."""
    if int(sample_rate) != SAMPLE_RATE:
        raise ValueError("sample_rate %s: libqvoice writes %d Hz audio" % (sample_rate, SAMPLE_RATE))
    write_audio(path, wav, "wav", watermark=watermark)


class Voice:
    """An opened .qvoice file (or voice NAME found as voices/NAME.qvoice or in $QVOICE_PATH)."""

    def __init__(self, path_or_name):
        lib = _capi.lib()
        h = ctypes.c_void_p()
        st = lib.qv_voice_open(ctypes.byref(h), _b(os.fspath(path_or_name)))
        if st:
            _raise(st)
        self._h = h
        self._free = weakref.finalize(self, lib.qv_voice_free, h)
        self.name = _s(lib.qv_voice_name(h))
        self.language = _s(lib.qv_voice_language(h))
        self.path = _s(lib.qv_voice_path(h))
        self.has_icl = bool(lib.qv_voice_has_icl(h))
        self.has_wdelta = bool(lib.qv_voice_has_wdelta(h))

    def close(self):
        self._free()

    def __repr__(self):
        return "Voice(%r)" % self.path


class VoiceClonePromptItem:
    """One cloned voice, as create_voice_clone_prompt returns it: a .qvoice file kept in a
    private temporary directory until .save() copies it somewhere lasting. `report` is the
    cloner's JSON report (used span, transcript fit, level, warnings) as a dict."""

    def __init__(self, path, tmpdir, ref_text, x_vector_only_mode, report):
        self.path, self.ref_text, self.report = path, ref_text, report
        self.x_vector_only_mode = bool(x_vector_only_mode)
        self.icl_mode = not self.x_vector_only_mode
        weakref.finalize(self, shutil.rmtree, tmpdir, True)

    # Pickled by value: the voice file's bytes travel, and unpickling writes them to a private
    # temporary directory of its own (a pickled path would point at a deleted file).
    def __getstate__(self):
        with open(self.path, "rb") as f:
            return {"voice": f.read(), "ref_text": self.ref_text, "report": self.report,
                    "x_vector_only_mode": self.x_vector_only_mode}

    def __setstate__(self, state):
        tmpdir = tempfile.mkdtemp(prefix="qvoice-prompt-")
        path = os.path.join(tmpdir, "voice.qvoice")
        with open(path, "wb") as f:
            f.write(state["voice"])
        self.__init__(path, tmpdir, state["ref_text"], state["x_vector_only_mode"],
                      state["report"])

    @property
    def ref_spk_embedding(self):
        """The speaker x-vector (float32: a NumPy array, else array('f')), as the official item's
        ref_spk_embedding."""
        lib = _capi.lib()
        ptr, dim = ctypes.c_void_p(), ctypes.c_int()
        st = lib.qv_clone_xvector(None, _b(self.path), 30.0, ctypes.byref(ptr), ctypes.byref(dim))
        if st:
            _raise(st)
        try:
            return _block(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), dim.value)
        finally:
            lib.qv_free(ptr)

    def save(self, path):
        """Writes the voice to path atomically (a temporary file in the same directory, renamed)."""
        path = os.fspath(path)
        fd, tmp = tempfile.mkstemp(prefix=".qvoice-", dir=os.path.dirname(path) or ".")
        try:
            with os.fdopen(fd, "wb") as out, open(self.path, "rb") as src:
                shutil.copyfileobj(src, out)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
        return path


class VoiceClonePrompts(list):
    """The list of VoiceClonePromptItem create_voice_clone_prompt returns (one per reference, as
    in qwen_tts); .save(path) saves the only item of a one-item list."""

    def save(self, path):
        if len(self) != 1:
            raise ValueError("save: %d voices in this prompt; save each item" % len(self))
        return self[0].save(path)


class Qwen3TTSModel:
    """A loaded checkpoint (Base, CustomVoice or VoiceDesign; 0.6B or 1.7B)."""

    def __init__(self, handle, model_dir, threads, quant, clone_model):
        self._lib, self.model_dir = _capi.lib(), model_dir
        lib = self._lib
        self._h = {"model": handle}  # C handles, freed together (close or garbage collection)
        self._free = weakref.finalize(self, _free_handles, lib, self._h)
        self.model_type = _s(lib.qv_model_type(handle))  # base / custom_voice / voice_design
        self.model_size = _s(lib.qv_model_size(handle))
        self.sample_rate = SAMPLE_RATE
        self._threads, self._quant = threads, quant
        self._clone_dir = clone_model or (model_dir if self.model_type == "base" else None)
        self._synth_key = None
        self._lock = threading.Lock()
        self.last_stats = None
        self._batching = False  # qv_model_set_batching done (by the first list input)
        p = lib.qv_model_params(handle)

        def f(x):  # float32 fields: 0.9, not 0.8999999761581421
            return round(x, 6)

        self.generate_defaults = {
            "do_sample": bool(p.do_sample), "temperature": f(p.temperature), "top_k": p.top_k,
            "top_p": f(p.top_p), "repetition_penalty": f(p.repetition_penalty),
            "subtalker_dosample": bool(p.subtalker_do_sample),
            "subtalker_temperature": f(p.subtalker_temperature),
            "subtalker_top_k": p.subtalker_top_k, "subtalker_top_p": f(p.subtalker_top_p),
            "max_new_tokens": p.max_frames + 1, "seed": p.seed}

    @property
    def _m(self):
        h = self._h.get("model")
        if h is None:
            raise ValueError("%s: this model was closed" % self.model_dir)
        return h

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, threads=0, quant="bf16",
                        clone_model=None, revision=None, cache_dir=None, local_files_only=None,
                        **kwargs):
        """Loads a model directory (config.json, model.safetensors, tokenizer, speech_tokenizer/).
        threads: compute threads, 0 = all online CPUs. quant: "bf16", "int8" or "q4" (matrices
        quantized on first use, kept in the prepared-weights cache). clone_model: a Base model directory whose speaker and
        speech encoders create_voice_clone_prompt uses (default: this model, if it is a Base
        one). A hub id "Org/Name" is found in the local Hugging Face cache (HF_HUB_CACHE, HF_HOME;
        revision, cache_dir as huggingface_hub takes them) and never downloaded (every load is
        local_files_only): fetch it first with `hf download`."""
        bad = set(kwargs) - _IGNORED_LOAD_KWARGS
        if bad:
            raise TypeError("from_pretrained: unexpected keyword argument(s) %s" % sorted(bad))
        lib = _capi.lib()
        q = lib.qv_quant_parse(_b(quant)) if isinstance(quant, str) else -1
        if q < 0:
            raise ValueError("quant: %r is not one of bf16, int8, q4" % (quant,))
        path = resolve_model_dir(pretrained_model_name_or_path, revision, cache_dir)
        if clone_model is not None:
            clone_model = resolve_model_dir(clone_model, None, cache_dir)
        h = ctypes.c_void_p()
        st = lib.qv_model_load(ctypes.byref(h), _b(path))
        if st:
            _raise(st)
        if lib.has("qv_threads_resolve"):
            threads = lib.qv_threads_resolve(int(threads))
        elif threads <= 0:
            threads = os.cpu_count() or 1
        return cls(h, path, int(threads), q, clone_model)

    def close(self):
        """Frees the model now (also done when the object is garbage-collected)."""
        with self._lock:
            self._free()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def reference_audio(self, voice):
        """What a voice file holds as its ICL reference: its codes decoded by this model's speech
        decoder, (wav, 24000). voice: a Voice, a path or a voice NAME. QvoiceError (QV_E_VOICE)
        for a voice without ICL codes (cloned without a transcript)."""
        v = voice if isinstance(voice, Voice) else Voice(voice)
        ptr, n = ctypes.c_void_p(), ctypes.c_int64()
        st = self._lib.qv_voice_reference_audio(v._h, self._m, self._threads, ctypes.byref(ptr),
                                                ctypes.byref(n))
        if st:
            _raise(st)
        try:
            return _block(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), n.value), SAMPLE_RATE
        finally:
            self._lib.qv_free(ptr)

    def get_supported_speakers(self):
        lib = self._lib
        return [_s(lib.qv_model_speaker(self._m, i)) for i in range(lib.qv_model_n_speakers(self._m))]

    def get_supported_languages(self):
        lib = self._lib
        return [_s(lib.qv_model_language(self._m, i))
                for i in range(lib.qv_model_n_languages(self._m))]

    # ---- synthesis ----

    def _params(self, kw):
        bad = set(kw) - set(_GEN_KWARGS) - set(_STYLE_KWARGS)
        if bad:
            raise TypeError("unexpected generation keyword argument(s) %s" % sorted(bad))
        p = self._lib.qv_model_params(self._m)
        p.n_threads, p.quant = self._threads, self._quant
        # a fresh take per call, as the official package samples (reproducible with seed=)
        p.seed = _SEEDS.getrandbits(63)
        for k, v in kw.items():
            if v is None or k in _STYLE_KWARGS:
                continue  # official rule: None means the model's default
            if k == "max_new_tokens":
                if int(v) < 2:
                    raise ValueError("max_new_tokens: %r is below 2" % v)
                p.max_frames = int(v) - 1
            else:
                setattr(p, _GEN_KWARGS[k], type(getattr(p, _GEN_KWARGS[k]))(v))
        return p

    def _get_synth(self, p):
        key = bytes(p)  # a synthesizer is made for one parameter set; reused while it holds
        if ("synth" in self._h and key != self._synth_key and self._lib.has("qv_synth_set_params")
                and not self._lib.qv_synth_set_params(self._h["synth"], ctypes.byref(p))):
            self._synth_key = key  # new seed or sampling: same session, pools and tokenizer
        if "synth" not in self._h or key != self._synth_key:
            if "synth" in self._h:
                self._lib.qv_synth_free(self._h.pop("synth"))
            st = self._lib.qv_params_check(ctypes.byref(p))  # the library's one range check
            if st:
                _raise(st)
            h = ctypes.c_void_p()
            st = self._lib.qv_synth_new(ctypes.byref(h), self._m, ctypes.byref(p))
            if st:
                _raise(st)
            self._h["synth"], self._synth_key = h, key
        return self._h["synth"]

    def _prepare(self, kw):
        """The parameters and style keywords of kw, with the model's one-synthesis lock taken
        (the caller releases it)."""
        kw = dict(kw)
        sty = {k: kw.pop(k) for k in _STYLE_KWARGS if k in kw}
        if not self._lock.acquire(blocking=False):
            raise RuntimeError("another synthesis is running on this model object")
        try:
            p = self._params(kw)
        except BaseException:
            self._lock.release()
            raise
        self._seed = p.seed  # reported in last_stats: a take can be repeated with seed=
        return p, sty

    def _run(self, job, kw, on_block, started=None):
        """Runs one synthesis on this thread; on_block(block) gets each PCM block and returns
        True to stop. job: text, language, speaker, instruct, voice (Voice), use_icl. kw: the
        generation keywords and the style ones (docs/markup.md): style, style_strength,
        style_table (text of "name = instruct" lines), strict_markup."""
        p, sty = self._prepare(kw)
        try:
            synth = self._get_synth(p)
            if started is not None:
                started(synth)
            self._synth_run(synth, job, sty, on_block)
        finally:
            self._lock.release()

    def _synth_run(self, synth, job, sty, on_block):
        """qv_synth_run of one job on synth (this thread); sets last_stats, raises on failure."""
        lib = self._lib
        r = lib.qv_synth_default_request()
        r.text = _b(job["text"])
        r.language = _b((job.get("language") or "auto").lower())
        r.speaker = _b(job["speaker"].lower()) if job.get("speaker") else None
        r.instruct = _b(job.get("instruct") or None)
        voice = job.get("voice")
        r.voice = voice._h if voice is not None else None
        r.use_icl = int(job.get("use_icl", 1))
        r.style = _b(sty.get("style"))
        r.style_strength = float(sty.get("style_strength") or 0)
        r.style_table = _b(sty.get("style_table"))
        r.strict_markup = int(bool(sty.get("strict_markup")))
        failure = []

        def cb(user, pcm, n):
            try:
                return 1 if on_block(_block(pcm, n)) else 0
            except BaseException as e:  # noqa: B902 -- re-raised after qv_synth_run
                failure.append(e)
                return 1

        fn = _capi.PCM_FN(cb)
        stats = _capi.SynthStats(struct_size=ctypes.sizeof(_capi.SynthStats))
        st = lib.qv_synth_run(synth, ctypes.byref(r), fn, None, ctypes.byref(stats))
        if failure:
            raise failure[0]
        last = {f: (_s(getattr(stats, f)) if isinstance(getattr(stats, f), bytes)
                    else getattr(stats, f)) for f, _ in _capi.SynthStats._fields_
                if f != "struct_size"}
        last["seed"] = self._seed
        self.last_stats = last
        if st:
            _raise(st)
        if last["warning"]:  # e.g. the library dropped a 0.6B CustomVoice instruct
            warnings.warn("qvoice: " + last["warning"], stacklevel=4)

    def run_jobs(self, lines, loudness=None, **kw):
        """speak --batch in-process: each item of lines is one job, a JSON object (or its text) with
        text, output and optionally speaker/voice, language, instruct, seed (docs/batch.md). Runs
        them in order with the library's runner, which writes each output atomically, and yields
        each job's result dict ({"line", "ok", "output", "seconds", ..., or "error"}). Blank lines
        are no job. kw: generation keywords for every job."""
        lib = self._lib
        p = self._params(kw)
        o = lib.qv_jobs_default_options()
        o.loudness_lufs = float(loudness or 0)
        h = ctypes.c_void_p()
        st = lib.qv_jobs_new(ctypes.byref(h), self._m, ctypes.byref(p), ctypes.byref(o))
        if st:  # the sampling ranges are checked here (qv_params_check)
            _raise(st)
        try:
            for n, line in enumerate(lines, 1):
                text = line if isinstance(line, str) else json.dumps(line)
                res = ctypes.c_void_p()
                lib.qv_jobs_run_line(h, n, _b(text), ctypes.byref(res))
                if res.value:
                    out = json.loads(ctypes.string_at(res.value).decode())
                    lib.qv_free(res)
                    yield out
        finally:
            lib.qv_jobs_free(h)

    def _generate(self, jobs, kw):
        if len(jobs) > 1 and self._lib.has("qv_model_set_batching"):
            return self._generate_batched(jobs, kw), SAMPLE_RATE
        wavs = []
        for job in jobs:
            blocks = []
            self._run(job, kw, lambda b: blocks.append(b))  # None: never stop
            wavs.append(_join(blocks))
        return wavs, SAMPLE_RATE

    def _generate_batched(self, jobs, kw):
        """List inputs as one batch: each text on its own synthesizer and thread, the model's
        batched streams stepping up to 8 of them together (each weight read once per step), with
        the audio of each the same as alone (the same seed for every item, as one by one)."""
        lib = self._lib
        p, sty = self._prepare(kw)
        try:
            if not self._batching:
                st = lib.qv_model_set_batching(self._m, _capi.BATCH_MAX_STREAMS)
                if st:
                    _raise(st)
                self._batching = True
            out, errors = [None] * len(jobs), []

            def work(i, synth):
                blocks = []
                try:
                    self._synth_run(synth, jobs[i], sty, lambda b: blocks.append(b))
                    out[i] = _join(blocks)
                except BaseException as e:  # noqa: B902 -- re-raised on the caller's thread
                    errors.append((i, e))

            for first in range(0, len(jobs), _capi.BATCH_MAX_STREAMS):
                group = range(first, min(first + _capi.BATCH_MAX_STREAMS, len(jobs)))
                synths = []
                try:
                    for _ in group:
                        h = ctypes.c_void_p()
                        st = lib.qv_synth_new(ctypes.byref(h), self._m, ctypes.byref(p))
                        if st:
                            _raise(st)
                        synths.append(h)
                    threads = [threading.Thread(target=work, args=(i, s))
                               for i, s in zip(group, synths)]
                    for th in threads:
                        th.start()
                    for th in threads:
                        th.join()
                finally:
                    for h in synths:
                        lib.qv_synth_free(h)
                if errors:
                    raise min(errors, key=lambda e: e[0])[1]
            return out
        finally:
            self._lock.release()

    def _stream(self, job, kw):
        """Generator of PCM blocks: the synthesis runs on a worker thread; closing the generator
        early cancels it."""
        q, stop, box = queue.Queue(), threading.Event(), {}

        def started(synth):
            box["synth"] = synth

        def on_block(b):
            q.put(b)
            return stop.is_set()

        def work():
            try:
                self._run(job, kw, on_block, started)
            except BaseException as e:  # noqa: B902 -- handed to the consumer
                box["error"] = e
            q.put(None)

        t = threading.Thread(target=work, daemon=True)
        t.start()
        try:
            while True:
                b = q.get()
                if b is None:
                    break
                yield b
        finally:
            stop.set()
            if t.is_alive() and "synth" in box:
                self._lib.qv_synth_cancel(box["synth"])
            t.join()
        err = box.get("error")
        if err is not None and not (stop.is_set() and getattr(err, "status", "") == "QV_E_CANCELLED"):
            raise err

    @staticmethod
    def _layout(non_streaming_mode, default):
        # qv_synth uses the official default text layout of each model type.
        if non_streaming_mode is not None and bool(non_streaming_mode) != default:
            raise ValueError("non_streaming_mode=%r: qvoice uses the official default (%r) for "
                             "this call" % (non_streaming_mode, default))

    def _need(self, model_type, method):
        if self.model_type != model_type:
            raise ValueError("%s: model %s is %s, not %s" % (method, self.model_dir,
                                                              self.model_type, model_type))

    def generate_custom_voice(self, text, speaker, language=None, instruct=None,
                              non_streaming_mode=None, **kwargs):
        """A preset speaker (CustomVoice; instruct on 1.7B). Returns (wavs, sample_rate)."""
        self._need("custom_voice", "generate_custom_voice")
        self._layout(non_streaming_mode, True)
        texts = [text] if isinstance(text, str) else list(text)
        n = len(texts)
        jobs = [dict(text=t, speaker=s, language=l, instruct=i) for t, s, l, i in
                zip(texts, _as_list(speaker, n, "speaker"), _as_list(language, n, "language"),
                    _as_list(instruct, n, "instruct"))]
        return self._generate(jobs, kwargs)

    def generate_voice_design(self, text, instruct, language=None, non_streaming_mode=None,
                              **kwargs):
        """A voice described in words (VoiceDesign). Returns (wavs, sample_rate)."""
        self._need("voice_design", "generate_voice_design")
        self._layout(non_streaming_mode, True)
        texts = [text] if isinstance(text, str) else list(text)
        n = len(texts)
        jobs = [dict(text=t, instruct=i, language=l) for t, i, l in
                zip(texts, _as_list(instruct, n, "instruct"), _as_list(language, n, "language"))]
        return self._generate(jobs, kwargs)

    def _voices(self, voice_clone_prompt, ref_audio, ref_text, x_vector_only_mode):
        if voice_clone_prompt is None:
            if ref_audio is None:
                raise ValueError("Either `voice_clone_prompt` or `ref_audio` must be provided.")
            voice_clone_prompt = self.create_voice_clone_prompt(ref_audio, ref_text,
                                                                x_vector_only_mode)
        items = (list(voice_clone_prompt) if isinstance(voice_clone_prompt, (list, tuple))
                 else [voice_clone_prompt])
        out = []
        for it in items:
            if isinstance(it, VoiceClonePromptItem):
                out.append(Voice(it.path))
            elif isinstance(it, Voice):
                out.append(it)
            elif isinstance(it, (str, os.PathLike)):
                out.append(Voice(it))
            else:
                raise TypeError("voice_clone_prompt: %s is not a prompt item, a Voice or a "
                                ".qvoice path" % type(it).__name__)
        return out

    def generate_voice_clone(self, text, language=None, ref_audio=None, ref_text=None,
                             x_vector_only_mode=False, voice_clone_prompt=None,
                             non_streaming_mode=None, **kwargs):
        """A cloned voice: voice_clone_prompt is what create_voice_clone_prompt returned, one of
        its items, a .qvoice path or voice name (or a list of them, one per text); or pass
        ref_audio/ref_text to clone on the fly. Any model the voice fits can speak it (a
        CustomVoice model uses the voice's Base text side). Returns (wavs, sample_rate)."""
        self._layout(non_streaming_mode, self.model_type != "base")
        texts = [text] if isinstance(text, str) else list(text)
        n = len(texts)
        voices = _as_list(self._voices(voice_clone_prompt, ref_audio, ref_text,
                                       x_vector_only_mode), n, "voice_clone_prompt")
        use_icl = not (voice_clone_prompt is not None and x_vector_only_mode)
        jobs = [dict(text=t, voice=v, language=l, use_icl=use_icl) for t, v, l in
                zip(texts, voices, _as_list(language, n, "language"))]
        return self._generate(jobs, kwargs)

    # ---- streaming: one text, audio blocks as they are decoded ----

    def stream_custom_voice(self, text, speaker, language=None, instruct=None, **kwargs):
        """Yields mono float32 blocks at sample_rate; concatenated they equal
        generate_custom_voice's audio for the same seed."""
        self._need("custom_voice", "stream_custom_voice")
        return self._stream(dict(text=text, speaker=speaker, language=language,
                                 instruct=instruct), kwargs)

    def stream_voice_design(self, text, instruct, language=None, **kwargs):
        self._need("voice_design", "stream_voice_design")
        return self._stream(dict(text=text, instruct=instruct, language=language), kwargs)

    def stream_voice_clone(self, text, voice_clone_prompt, language=None, **kwargs):
        (voice,) = _as_list(self._voices(voice_clone_prompt, None, None, False), 1,
                            "voice_clone_prompt")
        return self._stream(dict(text=text, voice=voice, language=language), kwargs)

    # ---- cloning ----

    def _get_cloner(self):
        if "cloner" not in self._h:
            if self._clone_dir is None:
                raise ValueError("create_voice_clone_prompt: %s is a %s model; cloning needs a "
                                 "Base model: load one, or pass clone_model=BASE_DIR to "
                                 "from_pretrained" % (self.model_dir, self.model_type))
            h = ctypes.c_void_p()
            st = self._lib.qv_cloner_load(ctypes.byref(h), _b(self._clone_dir), self._threads)
            if st:
                _raise(st)
            self._h["cloner"] = h
        return self._h["cloner"]

    @staticmethod
    def _audio_source(a, tmpdir):
        """(path, pcm, sample_rate) of one reference: a file path, an http(s) URL, base64 audio
        (as qwen_tts accepts), or a (samples, sample_rate) pair."""
        if isinstance(a, tuple) and len(a) == 2:
            samples, sr = a
            if _np is not None and isinstance(samples, _np.ndarray):
                if samples.ndim > 1:
                    samples = samples.mean(axis=-1)
                samples = _np.ascontiguousarray(samples, dtype=_np.float32)
                buf = (ctypes.c_float * len(samples)).from_buffer(samples)
            else:
                buf = (ctypes.c_float * len(samples))(*samples)
            return None, buf, int(sr)
        if isinstance(a, os.PathLike):
            return os.fspath(a), None, 0
        if not isinstance(a, str):
            raise TypeError("ref_audio: unsupported type %s" % type(a).__name__)
        u = urllib.parse.urlparse(a)
        if u.scheme in ("http", "https") and u.netloc:
            path = os.path.join(tmpdir, "ref_audio")
            with urllib.request.urlopen(a) as resp, open(path, "wb") as f:
                shutil.copyfileobj(resp, f)
            return path, None, 0
        if a.startswith("data:audio") or ("/" not in a and "\\" not in a and len(a) > 256):
            path = os.path.join(tmpdir, "ref_audio")
            with open(path, "wb") as f:
                f.write(base64.b64decode(a.split(",", 1)[1] if a.startswith("data:") else a))
            return path, None, 0
        return a, None, 0

    def create_voice_clone_prompt(self, ref_audio, ref_text=None, x_vector_only_mode=False, *,
                                  language=None, name=None, consent=None, max_seconds=30.0,
                                  hygiene=True, with_wovr=True, target_cv=None, icl_window="full",
                                  allow_xvector_fallback=False, consent_speaker=None,
                                  consent_scope=None, consent_recording=None):
        """Clones each reference (Base speaker and speech encoders: this model if Base, else
        from_pretrained's clone_model). ICL (ref codes + transcript) unless x_vector_only_mode;
        ICL needs ref_text, as in qwen_tts. Returns VoiceClonePrompts (a list, one item per
        reference); .save("x.qvoice") writes a voice file speak and the other tools read.
        Keyword-only extras are clone's options: language/name/consent stored in the voice,
        max_seconds of audio used, hygiene (trim, level, ICL window, transcript checks),
        with_wovr (Base text side), target_cv (CustomVoice dir: add a weight delta), icl_window:
        the part of the clip ref_text transcribes ("full": the whole trimmed clip, at most 30 s;
        "auto": the cleanest 10-15 s, reported in .report; or (start_s, end_s)),
        allow_xvector_fallback (a transcript that does not fit drops ICL instead of failing);
        consent with consent_speaker (who), consent_scope (to what) and consent_recording (a file
        of the spoken consent, hashed) make the voice's consent record (docs/provenance.md)."""
        if isinstance(icl_window, tuple) and len(icl_window) == 2:
            window, (icl_start, icl_end) = _capi.ICL_RANGE, map(float, icl_window)
        elif icl_window in _capi.ICL_WINDOW:
            window, icl_start, icl_end = _capi.ICL_WINDOW[icl_window], 0.0, 0.0
        else:
            raise ValueError("icl_window: %r is not 'full', 'auto' or (start_s, end_s)"
                             % (icl_window,))
        refs = list(ref_audio) if isinstance(ref_audio, list) else [ref_audio]
        n = len(refs)
        texts = _as_list(ref_text, n, "ref_text")
        xvec = _as_list(x_vector_only_mode, n, "x_vector_only_mode")
        cloner = self._get_cloner()
        out = VoiceClonePrompts()
        for i, (a, t, xo) in enumerate(zip(refs, texts, xvec)):
            if not xo and not t:
                raise ValueError("ref_text is required when x_vector_only_mode=False (ICL "
                                 "mode). Bad index=%d" % i)
            tmpdir = tempfile.mkdtemp(prefix="qvoice-")
            try:
                path, pcm, sr = self._audio_source(a, tmpdir)
                r = self._lib.qv_clone_default_request()
                r.audio_path = _b(path)
                if pcm is not None:
                    r.pcm = ctypes.cast(pcm, ctypes.POINTER(ctypes.c_float))
                    r.n_samples, r.sample_rate_hz = len(pcm), sr
                r.ref_text = None if xo else _b(t)
                r.language, r.name, r.consent = _b(language), _b(name), _b(consent)
                r.consent_speaker, r.consent_scope = _b(consent_speaker), _b(consent_scope)
                r.consent_recording = _b(consent_recording)
                r.max_seconds, r.hygiene, r.with_wovr = max_seconds, int(hygiene), int(with_wovr)
                r.target_cv_dir = _b(target_cv)
                r.icl_window, r.icl_start_s, r.icl_end_s = window, icl_start, icl_end
                r.allow_xvector_fallback = int(allow_xvector_fallback)
                voice_path = os.path.join(tmpdir, "voice.qvoice")
                report = ctypes.c_void_p()
                st = self._lib.qv_clone_run(cloner, ctypes.byref(r), _b(voice_path),
                                            ctypes.byref(report))
                detail = self._lib.last_error(st) if st else ""
                rep = {}
                if report.value:
                    rep = json.loads(ctypes.string_at(report.value).decode())
                    self._lib.qv_free(report)
                if st:
                    _raise(st, detail)
            except BaseException:
                shutil.rmtree(tmpdir, True)
                raise
            out.append(VoiceClonePromptItem(voice_path, tmpdir, None if xo else t, xo, rep))
        return out
