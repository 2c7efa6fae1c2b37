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
import bisect
import ctypes
import hashlib
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

# Markup and style keywords (docs/markup.md) and speed (0.25..4, a pitch-preserving time
# stretch): qv_synth_request fields, not generation ones.
_STYLE_KWARGS = ("style", "style_strength", "style_table", "strict_markup", "style_dirs", "speed")

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


def _voice_id(voice):
    """The voice id (qv_voice_id) of a Voice, a VoiceClonePromptItem or a voice file path; a str
    that is no file is taken as the id itself (e.g. "speaker:ryan" for a preset speaker)."""
    if voice is None:
        return ""
    if isinstance(voice, VoiceClonePromptItem):
        voice = voice.voice()
    if isinstance(voice, Voice):
        return voice.id
    if os.path.isfile(voice):
        h = hashlib.sha256()
        with open(voice, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()
    return str(voice)


def write_audio(path, wav, format=None, loudness=None, watermark=True, model=None, voice=None,
                sample_rate=None):
    """Writes mono 24 kHz float samples with libqvoice's encoder (the one speak and the server
    use), atomically: format by name or by path's extension (wav, pcm, flac, ogg ~99 kbit/s,
    opus 133 kbit/s, mp3 80 kbit/s, aac: AAC-LC 96 kbit/s in ADTS, through libavcodec when
    installed; rates the watermark survives); sample_rate: the file's
    rate, 8000-48000 (None: 24000), the marked samples resampled by the encoder (opus takes 8,
    12, 16, 24 or 48 kHz, mp3 and aac the MPEG rates: another raises naming them);
    loudness: a target integrated loudness in LUFS (EBU R128, e.g. -23), or None. The file
    says where it came from (docs/provenance.md): the model (a Qwen3TTSModel or its fingerprint)
    and the voice (a Voice, a VoiceClonePromptItem, a voice file path, or an id such as
    "speaker:ryan") go into its tags and the watermark's payload; watermark=False leaves the
    samples unmarked (the tags stay)."""
    lib = _capi.lib()
    path = os.fspath(path)
    fmt = lib.qv_format_parse(_b(format)) if format else lib.qv_format_of_path(_b(path))
    if fmt < 0:
        raise ValueError("%s: unknown format %r (expected wav, pcm, flac, ogg, opus, mp3 or aac)"
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
    prov = lib.qv_provenance_default()
    prov.watermark = 1 if watermark else 0
    prov.voice_id = _b(_voice_id(voice))[:128]
    fp = model.fingerprint if isinstance(model, Qwen3TTSModel) else (model or "")
    prov.model_fingerprint = _b(fp)[:64]
    rate = SAMPLE_RATE if sample_rate is None else int(sample_rate)
    if sample_rate is not None and rate != sample_rate:
        raise ValueError("sample_rate %r: expected an integer number of Hz" % (sample_rate,))
    st = lib.qv_audio_write_at(_b(path), fmt, rate, buf, n, ctypes.byref(prov))
    if st:
        _raise(st)


def write_wav(path, wav, sample_rate=SAMPLE_RATE, watermark=True, model=None, voice=None):
    """Writes mono float samples in [-1, 1] as a 16-bit PCM WAV (write_audio)."""
    if int(sample_rate) != SAMPLE_RATE:
        raise ValueError("sample_rate %s: libqvoice writes %d Hz audio" % (sample_rate, SAMPLE_RATE))
    write_audio(path, wav, "wav", watermark=watermark, model=model, voice=voice)


def _flat(x, what):
    """The numbers of x (a NumPy array, a torch tensor, nested lists) as a flat list, and the
    number of rows (len(x); 0 for an empty input)."""
    if hasattr(x, "detach"):  # torch: leave the graph and the device
        x = x.detach().cpu()
    if hasattr(x, "tolist"):
        x = x.tolist()
    if not isinstance(x, (list, tuple)):
        raise TypeError("%s: expected an array or a list, got %s" % (what, type(x).__name__))
    rows = len(x)
    flat = [v for row in x for v in row] if rows and isinstance(x[0], (list, tuple)) else list(x)
    return flat, rows


def _array(ptr, shape, typecode):
    """A copy of the numbers at ptr: a NumPy array of shape (float32 or int32), else a list (of
    lists for two dimensions)."""
    n = 1
    for d in shape:
        n *= d
    if _np is not None:
        if not n:
            return _np.zeros(shape, _np.float32 if typecode == "f" else _np.int32)
        return _np.ctypeslib.as_array(ptr, shape=(n,)).reshape(shape).copy()
    flat = list(ptr[:n]) if n else []
    if len(shape) == 1:
        return flat
    w = shape[1]
    return [flat[i:i + w] for i in range(0, n, w)]


class Voice:
    """An opened voice: a .qvoice file (or voice NAME found as voices/NAME.qvoice or in
    $QVOICE_PATH); Voice.from_bytes and Voice.from_parts make one in memory, without a file."""

    def __init__(self, path_or_name):
        h = ctypes.c_void_p()
        self._adopt(_capi.lib().qv_voice_open(ctypes.byref(h), _b(os.fspath(path_or_name))), h)

    @classmethod
    def from_bytes(cls, data, name="memory"):
        """The voice whose voice file's bytes are data (copied); name is used in messages."""
        v, h = cls.__new__(cls), ctypes.c_void_p()
        data = bytes(data)
        v._adopt(_capi.lib().qv_voice_open_memory(ctypes.byref(h), data, len(data), _b(name)), h)
        return v

    @classmethod
    def from_parts(cls, xvector, ref_code=None, ref_text=None, language=None):
        """A voice from an x-vector (the official ref_spk_embedding) and, for ICL, its reference
        codes (frames x 16, the official ref_code) with their transcript ref_text."""
        xs, _ = _flat(xvector, "ref_spk_embedding")
        codes, n_frames = ([], 0) if ref_code is None else _flat(ref_code, "ref_code")
        if len(codes) != 16 * n_frames:
            raise ValueError("ref_code: expected frames of 16 codes, got %d values in %d rows"
                             % (len(codes), n_frames))
        v, h = cls.__new__(cls), ctypes.c_void_p()
        st = _capi.lib().qv_voice_from_parts(
            ctypes.byref(h), (ctypes.c_float * len(xs))(*xs), len(xs),
            (ctypes.c_int32 * len(codes))(*[int(c) for c in codes]) if codes else None,
            n_frames, _b(ref_text or None), _b(language))
        v._adopt(st, h)
        return v

    def _adopt(self, st, h):
        lib = _capi.lib()
        if st:
            _raise(st)
        self._h = h
        self._free = weakref.finalize(self, lib.qv_voice_free, h)
        self.name = _s(lib.qv_voice_name(h))
        self.language = _s(lib.qv_voice_language(h))
        self.path = _s(lib.qv_voice_path(h))
        self.has_icl = bool(lib.qv_voice_has_icl(h))
        self.has_wdelta = bool(lib.qv_voice_has_wdelta(h))

    @property
    def id(self):
        """The voice's id (qv_voice_id): SHA-256 of its file's bytes, hex."""
        return _s(_capi.lib().qv_voice_id(self._h))

    @property
    def xvector(self):
        """The speaker x-vector (float32: a NumPy array, else a list)."""
        dim = ctypes.c_int()
        ptr = _capi.lib().qv_voice_xvector(self._h, ctypes.byref(dim))
        return _array(ptr, (dim.value,), "f")

    @property
    def ref_code(self):
        """The ICL reference frames (frames x 16 int32: a NumPy array, else lists), or None."""
        n = ctypes.c_int()
        ptr = _capi.lib().qv_voice_ref_codes(self._h, ctypes.byref(n))
        return _array(ptr, (n.value, 16), "i") if n.value else None

    @property
    def ref_text(self):
        t = _capi.lib().qv_voice_ref_text(self._h)
        return None if t is None else _s(t)

    @property
    def styles(self):
        """The voice's style palette (docs/markup.md): {name: {"kind": "variant" | "direction",
        "strength": default strength}}, the names style= and markup tags find."""
        lib, out, i = _capi.lib(), {}, 0
        is_dir, strength = ctypes.c_int(), ctypes.c_float()
        while True:
            name = lib.qv_voice_style(self._h, i, ctypes.byref(is_dir), ctypes.byref(strength))
            if name is None:
                return out
            out[_s(name)] = {"kind": "direction" if is_dir.value else "variant",
                             "strength": round(strength.value, 6)}
            i += 1

    def save(self, path):
        """Writes the voice to path as a .qvoice file, atomically."""
        st = _capi.lib().qv_voice_save(self._h, _b(os.fspath(path)))
        if st:
            _raise(st)
        return os.fspath(path)

    def close(self):
        self._free()

    def __repr__(self):
        return "Voice(%r)" % self.path


def _style_dirs(dirs):
    """qv_style_dir entries of style_dirs, {name: direction}: a vector (the unit shift in
    x-vector space, any norm), or the path of a .bin or .qvoice holding it (voicefmt palette
    derive); strength 0.25 unless style_strength is given (docs/markup.md)."""
    if not dirs:
        return []
    out = (_capi.StyleDir * len(dirs))()
    for d, (name, vec) in zip(out, dirs.items()):
        if isinstance(vec, (str, os.PathLike)):
            vec = Voice(vec).xvector
        xs, _ = _flat(vec, "style_dirs[%r]" % name)
        d.struct_size, d.name, d.dim = ctypes.sizeof(d), _b(name), len(xs)
        d.direction = (ctypes.c_float * len(xs))(*xs)
    return out


class VoiceClonePromptItem:
    """One cloned voice with the official item's fields: ref_code (frames x 16 int32, None in
    x-vector-only mode), ref_spk_embedding (float32; NumPy arrays when NumPy is importable, else
    lists), x_vector_only_mode, icl_mode, ref_text. Constructed from those fields as the official
    dataclass is, or by create_voice_clone_prompt, which also keeps the cloned voice file's bytes
    (voice_bytes: its text side, language, consent record) and the cloner's report (a dict).
    Everything is held by value: a pickled item speaks the same in another process."""

    def __init__(self, ref_code=None, ref_spk_embedding=None, x_vector_only_mode=False,
                 icl_mode=None, ref_text=None, *, voice_bytes=None, report=None):
        self.voice_bytes = None if voice_bytes is None else bytes(voice_bytes)
        self.report = report
        self._voice = None
        if self.voice_bytes is not None:
            v = self.voice()
            ref_spk_embedding = v.xvector if ref_spk_embedding is None else ref_spk_embedding
            if ref_code is None and not x_vector_only_mode:
                ref_code, ref_text = v.ref_code, v.ref_text
        if ref_spk_embedding is None:
            raise ValueError("VoiceClonePromptItem: ref_spk_embedding is required")
        self.ref_code, self.ref_spk_embedding, self.ref_text = ref_code, ref_spk_embedding, ref_text
        self.x_vector_only_mode = bool(x_vector_only_mode)
        self.icl_mode = (not self.x_vector_only_mode) if icl_mode is None else bool(icl_mode)
        if self.icl_mode and (ref_code is None or not ref_text):
            raise ValueError("VoiceClonePromptItem: icl_mode needs ref_code and ref_text (the "
                             "transcript of the reference); use x_vector_only_mode=True without")

    def voice(self):
        """The Voice this item speaks with, made in memory once: from voice_bytes when the item
        has them, else from its ref_spk_embedding (and ref_code + ref_text in ICL mode)."""
        if self._voice is None:
            if self.voice_bytes is not None:
                self._voice = Voice.from_bytes(self.voice_bytes, "voice_clone_prompt item")
            else:
                icl = self.icl_mode
                self._voice = Voice.from_parts(self.ref_spk_embedding,
                                               self.ref_code if icl else None,
                                               self.ref_text if icl else None)
        return self._voice

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_voice"] = None  # a library handle; remade on first use
        return state

    def save(self, path):
        """Writes the voice to path as a .qvoice file (atomically) that speak, the server and
        Voice(path) read."""
        return self.voice().save(path)

    def __repr__(self):
        n = 0 if self.ref_code is None else len(self.ref_code)
        return ("VoiceClonePromptItem(ref_code=<%d frames>, ref_spk_embedding=<%d>, "
                "x_vector_only_mode=%r, icl_mode=%r, ref_text=%r)"
                % (n, len(self.ref_spk_embedding), self.x_vector_only_mode, self.icl_mode,
                   self.ref_text))


_PROMPT_KEYS = ("ref_code", "ref_spk_embedding", "x_vector_only_mode", "icl_mode")


def _prompt_items(prompt):
    """The items of the official dict form {ref_code: [...], ref_spk_embedding: [...],
    x_vector_only_mode: [...], icl_mode: [...]} (one entry per text), with ref_text: [...] as
    qvoice's addition: ICL entries need their transcript, which the official dict lacks."""
    bad = set(prompt) - set(_PROMPT_KEYS) - {"ref_text"}
    if bad:
        raise ValueError("voice_clone_prompt: unknown field(s) %s" % sorted(bad))
    if "ref_spk_embedding" not in prompt:
        raise ValueError("voice_clone_prompt: ref_spk_embedding is required")
    n = len(prompt["ref_spk_embedding"])
    cols = {k: list(prompt.get(k) if prompt.get(k) is not None else [None] * n)
            for k in _PROMPT_KEYS + ("ref_text",)}
    if any(len(c) != n for c in cols.values()):
        raise ValueError("Batch size mismatch in `voice_clone_prompt` fields: %s"
                         % {k: len(c) for k, c in cols.items()})
    items = []
    for i in range(n):
        xo = bool(cols["x_vector_only_mode"][i])
        icl = cols["icl_mode"][i]
        icl = (not xo) if icl is None else bool(icl)
        if icl and not cols["ref_text"][i]:
            raise ValueError("voice_clone_prompt: entry %d is icl_mode without its transcript: "
                             "add ref_text=[...] to the dict, or pass the prompt items" % i)
        items.append(VoiceClonePromptItem(cols["ref_code"][i] if icl else None,
                                          cols["ref_spk_embedding"][i], xo, icl,
                                          cols["ref_text"][i] if icl else None))
    return items


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
        fp = ctypes.create_string_buffer(65)
        lib.qv_model_fingerprint(handle, fp)
        self.fingerprint = _s(fp.value)  # SHA-256 fingerprint of the checkpoint, hex
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
        if bad:  # never ignored: a misspelt keyword would otherwise sample with the default
            raise TypeError("unexpected generation keyword argument(s) %s (known: %s)"
                            % (", ".join(repr(k) for k in sorted(bad)),
                               ", ".join(sorted(_GEN_KWARGS) + sorted(_STYLE_KWARGS))))
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
        style_table (text of "name = instruct" lines), strict_markup, style_dirs ({name:
        direction vector or .bin path}, speak's --style-dir)."""
        p, sty = self._prepare(kw)
        try:
            synth = self._get_synth(p)
            if started is not None:
                started(synth)
            return self._synth_run(synth, job, sty, on_block)
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
        r.speed = float(sty.get("speed", 1.0))
        dirs = _style_dirs(sty.get("style_dirs"))  # kept alive through the run
        r.style_dirs = ctypes.cast(dirs, ctypes.c_void_p) if dirs else None
        r.n_style_dirs = len(dirs)
        failure = []

        def cb(user, pcm, n):
            try:
                return 1 if failure or on_block(_block(pcm, n)) else 0
            except BaseException as e:  # noqa: B902 -- re-raised after qv_synth_run
                failure.append(e)
                return 1

        def chunk_cb(user, info):  # a failing on_chunk stops the synthesis at the next block
            try:
                on_chunk(info.contents.text_offset)
            except BaseException as e:  # noqa: B902 -- re-raised after qv_synth_run
                failure.append(e)

        fn = _capi.PCM_FN(cb)
        stats = _capi.SynthStats(struct_size=ctypes.sizeof(_capi.SynthStats))
        on_chunk = job.get("on_chunk")
        if on_chunk is not None:
            chunk_fn = _capi.CHUNK_FN(chunk_cb)
            lib.qv_synth_set_chunk_fn(synth, chunk_fn, None)
        try:
            st = lib.qv_synth_run(synth, ctypes.byref(r), fn, None, ctypes.byref(stats))
        finally:
            if on_chunk is not None:
                lib.qv_synth_set_chunk_fn(synth, _capi.CHUNK_FN(), None)
        if failure:
            raise failure[0]
        last = {f: (_s(getattr(stats, f)) if isinstance(getattr(stats, f), bytes)
                    else getattr(stats, f)) for f, _ in _capi.SynthStats._fields_
                if f != "struct_size"}
        last["seed"] = self._seed
        self.last_stats = last
        if st:
            _raise(st)
        return last["warning"]  # warned on the caller's thread (_warn)

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

    @staticmethod
    def _warn(warning, stacklevel):
        if warning:  # e.g. the library dropped a 0.6B CustomVoice instruct, or a markup tag
            warnings.warn("qvoice: " + warning, stacklevel=stacklevel + 1)

    def _generate(self, jobs, kw):
        if len(jobs) > 1 and self._lib.has("qv_model_set_batching"):
            wavs, notes = self._generate_batched(jobs, kw)
        else:
            wavs, notes = [], []
            for job in jobs:
                blocks = []
                notes.append(self._run(job, kw, lambda b: blocks.append(b)))  # never stop
                wavs.append(_join(blocks))
        for w in notes:
            self._warn(w, 3)  # at the line that called generate_*
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
            out, notes, errors = [None] * len(jobs), [""] * len(jobs), []

            def work(i, synth):
                blocks = []
                try:
                    notes[i] = self._synth_run(synth, jobs[i], sty, lambda b: blocks.append(b))
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
            return out, notes
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
                box["warning"] = self._run(job, kw, on_block, started)
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
        self._warn(box.get("warning"), 2)  # at the consumer's next()

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
        """(Voice, use_icl) per prompt entry: items (a list, one, or the official dict form),
        Voice objects, .qvoice paths or voice names, or a clone of ref_audio made now."""
        if voice_clone_prompt is None:
            if ref_audio is None:
                raise ValueError("Either `voice_clone_prompt` or `ref_audio` must be provided.")
            voice_clone_prompt = self.create_voice_clone_prompt(ref_audio, ref_text,
                                                                x_vector_only_mode)
        if isinstance(voice_clone_prompt, dict):
            voice_clone_prompt = _prompt_items(voice_clone_prompt)
        items = (list(voice_clone_prompt) if isinstance(voice_clone_prompt, (list, tuple))
                 else [voice_clone_prompt])
        out = []
        for it in items:
            if isinstance(it, VoiceClonePromptItem):
                out.append((it.voice(), it.icl_mode))
            elif isinstance(it, Voice):
                out.append((it, not x_vector_only_mode))
            elif isinstance(it, (str, os.PathLike)):
                out.append((Voice(it), not x_vector_only_mode))
            else:
                raise TypeError("voice_clone_prompt: %s is not a prompt item, the official dict, "
                                "a Voice or a .qvoice path" % type(it).__name__)
        return out

    def generate_voice_clone(self, text, language=None, ref_audio=None, ref_text=None,
                             x_vector_only_mode=False, voice_clone_prompt=None,
                             non_streaming_mode=None, **kwargs):
        """A cloned voice: voice_clone_prompt is what create_voice_clone_prompt returned, one of
        its items, the official dict form, a Voice, a .qvoice path or voice name (or a list,
        one per text); or pass ref_audio/ref_text to clone on the fly. Any model the voice fits
        can speak it (a CustomVoice model uses the voice's Base text side). Returns
        (wavs, sample_rate)."""
        self._layout(non_streaming_mode, self.model_type != "base")
        texts = [text] if isinstance(text, str) else list(text)
        n = len(texts)
        voices = _as_list(self._voices(voice_clone_prompt, ref_audio, ref_text,
                                       x_vector_only_mode), n, "voice_clone_prompt")
        jobs = [dict(text=t, voice=v, language=l, use_icl=icl) for t, (v, icl), l in
                zip(texts, voices, _as_list(language, n, "language"))]
        return self._generate(jobs, kwargs)

    # ---- dialogue scripts (docs/markup.md), as speak --script ----

    def _script_job(self, script, language, pause_ms, on_line):
        """The job of a dialogue script: its markup text (qv_script_to_markup) and, when on_line
        is given, a chunk callback calling on_line(line, index, n_lines) once per script line."""
        if isinstance(script, os.PathLike) or (isinstance(script, str) and "\n" not in script
                                                and os.path.isfile(script)):
            with open(script, encoding="utf-8") as f:
                script = f.read()
        lib = self._lib
        markup, offs, lines, n = (ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p(),
                                  ctypes.c_int())
        st = lib.qv_script_to_markup(_b(script), int(pause_ms), ctypes.byref(markup),
                                     ctypes.byref(offs), ctypes.byref(lines), ctypes.byref(n))
        if st:
            _raise(st)
        try:
            text = _s(ctypes.string_at(markup.value))
            ints = ctypes.POINTER(ctypes.c_int)
            starts = ctypes.cast(offs, ints)[:n.value]
            numbers = ctypes.cast(lines, ints)[:n.value]
        finally:
            for p in (markup, offs, lines):
                lib.qv_free(p)
        job = dict(text=text, language=language)
        if on_line is not None:
            seen = [0]

            def on_chunk(text_offset):
                i = bisect.bisect_right(starts, text_offset)
                if i and i != seen[0]:
                    seen[0] = i
                    on_line(numbers[i - 1], i, n.value)

            job["on_chunk"] = on_chunk
        return job

    def speak_script(self, script, language=None, pause_ms=600, on_line=None, **kwargs):
        """speak --script: a dialogue (its text, or the path of a file) of lines "NAME: text",
        NAME a preset speaker or a voice name (voices/NAME.qvoice, $QVOICE_PATH), the text with
        optional markup tags; a blank line is a pause of pause_ms; '#' lines are comments. One
        take for the whole script: returns (wavs, sample_rate) with one wav. on_line(line,
        index, n_lines) is called as each script line's first chunk completes (speak's progress
        line). Style keywords (style, style_strength, style_table, strict_markup) and generation
        keywords as for the other methods."""
        return self._generate([self._script_job(script, language, pause_ms, on_line)], kwargs)

    def stream_script(self, script, language=None, pause_ms=600, on_line=None, **kwargs):
        """speak_script's audio as blocks, as they are decoded."""
        return self._stream(self._script_job(script, language, pause_ms, on_line), kwargs)

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
        ((voice, icl),) = _as_list(self._voices(voice_clone_prompt, None, None, False), 1,
                                   "voice_clone_prompt")
        return self._stream(dict(text=text, voice=voice, language=language, use_icl=icl), kwargs)

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
                with open(voice_path, "rb") as f:
                    data = f.read()
            finally:  # the item holds the voice by value: nothing is left on disk
                shutil.rmtree(tmpdir, True)
            # without ICL when asked, or when the transcript fell back to the x-vector
            icl = Voice.from_bytes(data).has_icl
            out.append(VoiceClonePromptItem(x_vector_only_mode=not icl, voice_bytes=data,
                                            report=rep))
        return out
