"""ctypes declarations of the C API in include/qvoice.h (the structs mirror it field for field and
STATUS its enum qv_status; tests/python/test_tiny.py compares both with the C compiler's) and the
search for libqvoice.so: $QVOICE_LIB, the package's own copy, the source tree's build/, then the
system. Errors follow the library's convention: a status, then qv_last_error() on this thread."""
import ctypes
import ctypes.util
import os

c_int, c_float, c_double, c_char_p, c_void_p = (ctypes.c_int, ctypes.c_float, ctypes.c_double,
                                                ctypes.c_char_p, ctypes.c_void_p)
c_int64, c_uint32, c_uint64 = ctypes.c_int64, ctypes.c_uint32, ctypes.c_uint64

STATUS = ["QV_OK", "QV_E_INVALID", "QV_E_MODEL", "QV_E_NOMEM", "QV_E_SPEAKER", "QV_E_LANGUAGE",
          "QV_E_UNSUPPORTED", "QV_E_LIMIT", "QV_E_STATE", "QV_E_VOICE", "QV_E_FOREIGN_VOICE",
          "QV_E_GUARD", "QV_E_CANCELLED", "QV_E_AUDIO", "QV_E_IO", "QV_E_VOCAB", "QV_E_ABI"]
BATCH_MAX_STREAMS = 8  # QV_BATCH_MAX_STREAMS
ICL_WINDOW = {"full": 0, "auto": 1}  # enum qv_icl_window; a (start_s, end_s) pair is QV_ICL_RANGE
ICL_RANGE = 2
SAMPLE_RATE = 24000


class Params(ctypes.Structure):
    _fields_ = [("struct_size", c_uint32), ("n_threads", c_int), ("seed", c_uint64), ("do_sample", c_int),
                ("temperature", c_float), ("top_k", c_int), ("top_p", c_float),
                ("repetition_penalty", c_float), ("subtalker_do_sample", c_int),
                ("subtalker_temperature", c_float), ("subtalker_top_k", c_int),
                ("subtalker_top_p", c_float), ("max_frames", c_int), ("quant", c_int),
                ("ignore_eos", c_int)]


class SynthRequest(ctypes.Structure):
    _fields_ = [("struct_size", c_uint32), ("text", c_char_p), ("language", c_char_p), ("speaker", c_char_p),
                ("voice", c_void_p), ("voice_path", c_char_p), ("instruct", c_char_p),
                ("use_icl", c_int), ("use_wdelta", c_int), ("force_voice", c_int),
                ("force_instruct", c_int),
                ("strict_vocab", c_int), ("max_chunk_chars", c_int), ("guard", c_int), ("trim_lead", c_int),
                ("max_seconds", c_double), ("codes_only", c_int), ("whole_chunks", c_int),
                ("verify_model_dir", c_char_p), ("style", c_char_p), ("style_strength", c_float),
                ("style_dirs", c_void_p), ("n_style_dirs", c_int), ("style_table", c_char_p),
                ("strict_markup", c_int), ("speed", c_double)]


class SynthStats(ctypes.Structure):
    _fields_ = [("struct_size", c_uint32), ("n_chunks", c_int), ("n_frames", c_int), ("n_samples", c_int64),
                ("audio_seconds", c_double), ("first_audio_s", c_double), ("total_s", c_double),
                ("rtf", c_double), ("capped", c_int), ("guard_trips", c_int),
                ("guard_verdict", ctypes.c_char * 16), ("wdelta_applied", c_int),
                ("n_verify", c_int), ("verify_min", c_double), ("verify_mean", c_double),
                ("warning", ctypes.c_char * 512)]


class CloneRequest(ctypes.Structure):
    _fields_ = [("struct_size", c_uint32), ("audio_path", c_char_p), ("pcm", ctypes.POINTER(c_float)),
                ("n_samples", c_int64), ("sample_rate_hz", c_int), ("ref_text", c_char_p),
                ("language", c_char_p), ("name", c_char_p), ("consent", c_char_p),
                ("max_seconds", c_double), ("hygiene", c_int), ("with_wovr", c_int),
                ("target_cv_dir", c_char_p), ("icl_window", c_int), ("icl_start_s", c_double),
                ("icl_end_s", c_double), ("allow_xvector_fallback", c_int),
                ("speaker_threshold", c_double), ("plot_path", c_char_p),
                ("consent_speaker", c_char_p), ("consent_scope", c_char_p),
                ("consent_recording", c_char_p)]


class JobsOptions(ctypes.Structure):
    _fields_ = [("struct_size", c_uint32), ("request", SynthRequest), ("loudness_lufs", c_double),
                ("watermark", c_uint32)]


class Provenance(ctypes.Structure):
    _fields_ = [("struct_size", c_uint32), ("watermark", c_int), ("voice_id", ctypes.c_char * 129),
                ("model_fingerprint", ctypes.c_char * 65), ("utc", c_int64)]


class StyleDir(ctypes.Structure):
    _fields_ = [("struct_size", c_uint32), ("name", c_char_p), ("direction", ctypes.POINTER(c_float)),
                ("dim", c_int), ("strength", c_float)]


class ChunkInfo(ctypes.Structure):
    _fields_ = [("struct_size", c_uint32), ("index", c_int), ("text_offset", c_int),
                ("codes", ctypes.POINTER(ctypes.c_int32)), ("n_frames", c_int), ("verify", c_double),
                ("text_chunk", c_int), ("n_text_chunks", c_int)]


# C struct name -> ctypes class, for the layout test.
STRUCTS = {"qv_params": Params, "qv_synth_request": SynthRequest, "qv_synth_stats": SynthStats,
           "qv_clone_request": CloneRequest, "qv_jobs_options": JobsOptions,
           "qv_chunk_info": ChunkInfo, "qv_style_dir": StyleDir, "qv_provenance": Provenance}

PCM_FN = ctypes.CFUNCTYPE(c_int, c_void_p, ctypes.POINTER(c_float), c_int)
CHUNK_FN = ctypes.CFUNCTYPE(None, c_void_p, ctypes.POINTER(ChunkInfo))
_P = ctypes.POINTER
PROTOTYPES = {
    "qv_version": (c_char_p, []),
    "qv_strerror": (c_char_p, [c_int]),
    "qv_last_error": (c_char_p, []),
    "qv_free": (None, [c_void_p]),
    "qv_model_load": (c_int, [_P(c_void_p), c_char_p]),
    "qv_model_free": (None, [c_void_p]),
    "qv_model_type": (c_char_p, [c_void_p]),
    "qv_model_size": (c_char_p, [c_void_p]),
    "qv_model_hidden_size": (c_int, [c_void_p]),
    "qv_model_n_speakers": (c_int, [c_void_p]),
    "qv_model_speaker": (c_char_p, [c_void_p, c_int]),
    "qv_model_n_languages": (c_int, [c_void_p]),
    "qv_model_language": (c_char_p, [c_void_p, c_int]),
    "qv_model_params": (Params, [c_void_p]),
    "qv_threads_resolve": (c_int, [c_int]),
    "qv_voice_open": (c_int, [_P(c_void_p), c_char_p]),
    "qv_voice_free": (None, [c_void_p]),
    "qv_voice_name": (c_char_p, [c_void_p]),
    "qv_voice_language": (c_char_p, [c_void_p]),
    "qv_voice_path": (c_char_p, [c_void_p]),
    "qv_voice_id": (c_char_p, [c_void_p]),
    "qv_model_fingerprint": (None, [c_void_p, c_char_p]),
    "qv_provenance_default": (Provenance, []),
    "qv_voice_has_icl": (c_int, [c_void_p]),
    "qv_voice_has_wdelta": (c_int, [c_void_p]),
    "qv_voice_reference_audio": (c_int, [c_void_p, c_void_p, c_int, _P(c_void_p), _P(c_int64)]),
    "qv_voice_open_memory": (c_int, [_P(c_void_p), c_char_p, ctypes.c_size_t, c_char_p]),
    "qv_voice_from_parts": (c_int, [_P(c_void_p), _P(c_float), c_int, _P(ctypes.c_int32), c_int,
                                    c_char_p, c_char_p]),
    "qv_voice_save": (c_int, [c_void_p, c_char_p]),
    "qv_voice_xvector": (_P(c_float), [c_void_p, _P(c_int)]),
    "qv_voice_ref_codes": (_P(ctypes.c_int32), [c_void_p, _P(c_int)]),
    "qv_voice_ref_text": (c_char_p, [c_void_p]),
    "qv_voice_style": (c_char_p, [c_void_p, c_int, _P(c_int), _P(c_float)]),
    "qv_synth_default_request": (SynthRequest, []),
    "qv_synth_new": (c_int, [_P(c_void_p), c_void_p, _P(Params)]),
    "qv_synth_free": (None, [c_void_p]),
    "qv_synth_set_params": (c_int, [c_void_p, _P(Params)]),
    "qv_model_set_batching": (c_int, [c_void_p, c_int]),
    "qv_synth_run": (c_int, [c_void_p, _P(SynthRequest), PCM_FN, c_void_p, _P(SynthStats)]),
    "qv_synth_cancel": (None, [c_void_p]),
    "qv_synth_set_chunk_fn": (None, [c_void_p, CHUNK_FN, c_void_p]),
    "qv_script_to_markup": (c_int, [c_char_p, c_int, _P(c_void_p), _P(c_void_p), _P(c_void_p),
                                    _P(c_int)]),
    "qv_clone_default_request": (CloneRequest, []),
    "qv_cloner_load": (c_int, [_P(c_void_p), c_char_p, c_int]),
    "qv_cloner_free": (None, [c_void_p]),
    "qv_cloner_fingerprint": (None, [c_void_p, c_char_p]),
    "qv_clone_run": (c_int, [c_void_p, _P(CloneRequest), c_char_p, _P(c_void_p)]),
    "qv_params_check": (c_int, [_P(Params)]),
    "qv_jobs_default_options": (JobsOptions, []),
    "qv_jobs_new": (c_int, [_P(c_void_p), c_void_p, _P(Params), _P(JobsOptions)]),
    "qv_jobs_run_line": (c_int, [c_void_p, c_int, c_char_p, _P(c_void_p)]),
    "qv_jobs_free": (None, [c_void_p]),
    "qv_format_parse": (c_int, [c_char_p]),
    "qv_quant_parse": (c_int, [c_char_p]),
    "qv_format_of_path": (c_int, [c_char_p]),
    "qv_loudness_normalize": (c_int, [_P(c_float), ctypes.c_int64, ctypes.c_double,
                                      _P(ctypes.c_int64), _P(ctypes.c_double)]),
    "qv_audio_write_at": (c_int, [c_char_p, c_int, c_int, _P(c_float), ctypes.c_int64,
                                  _P(Provenance)]),
}


def find_library():
    """Path (or soname) of libqvoice.so to load, in the documented order."""
    env = os.environ.get("QVOICE_LIB")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for cand in (os.path.join(here, "libqvoice.so.0"),
                 os.path.join(here, "..", "..", "build", "libqvoice.so.0")):
        if os.path.exists(cand):
            return os.path.normpath(cand)
    return ctypes.util.find_library("qvoice") or "libqvoice.so.0"


class _Missing:
    """Stands in for a function this libqvoice.so does not export (an older build)."""

    def __init__(self, name, path):
        self.name, self.path = name, path

    def __call__(self, *args):
        raise NotImplementedError("%s: this libqvoice has no %s (rebuild it with make)"
                                  % (self.path, self.name))


class Lib:
    """The loaded library with argtypes/restype set; missing functions raise when called."""

    def __init__(self, path=None):
        self.path = path or find_library()
        try:
            self.dll = ctypes.CDLL(self.path)
        except OSError as e:
            raise OSError("%s: cannot load libqvoice (%s); build it with make, or set QVOICE_LIB"
                          % (self.path, e)) from None
        for name, (restype, argtypes) in PROTOTYPES.items():
            try:
                fn = getattr(self.dll, name)
            except AttributeError:
                setattr(self, name, _Missing(name, self.path))
                continue
            fn.restype, fn.argtypes = restype, argtypes
            setattr(self, name, fn)

    def has(self, name):
        return not isinstance(getattr(self, name), _Missing)

    def last_error(self, status):
        """The detail of the call that just failed on this thread (qv_last_error)."""
        return (self.qv_last_error() or self.qv_strerror(status) or b"").decode("utf-8", "replace")


_lib = None


def lib():
    global _lib
    if _lib is None:
        _lib = Lib()
    return _lib
