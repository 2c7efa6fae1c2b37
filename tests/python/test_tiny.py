"""The qvoice Python package on the tiny synthetic models ($QVOICE_CACHE/tiny-*): the ctypes
structs against the C compiler's layout, loading and its errors, the official names, keyword
handling and return shapes, streaming vs one-shot audio, cloning to a .qvoice and speaking it.
Synthesis and cloning tests skip when the loaded libqvoice lacks qv_synth_run / qv_clone_run."""
import array
import os
import subprocess
import tempfile
import unittest
import wave
import warnings

import qvoice
from qvoice import _capi

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE = os.environ.get("QVOICE_CACHE", os.path.join(REPO, "cache"))
CLIP = os.path.join(REPO, "tests", "audio", "en_ohenry_chenevert.wav")
CLIP_TEXT = ("One dollar and eighty seven cents. That was all. And sixty cents of it was in "
             "pennies saved one and two at a time.")
LIB = _capi.lib()
HAS_SYNTH = LIB.has("qv_synth_run")
HAS_CLONE = LIB.has("qv_clone_run")
SHORT = dict(max_new_tokens=6, seed=7)  # a random model never stops: cap the frames


def clip_samples(seconds):
    """The first seconds of the bundled clip as floats (the span CLIP_TEXT transcribes: 8 s)."""
    with wave.open(CLIP) as w:
        raw = array.array("h", w.readframes(int(w.getframerate() * seconds)))
        return [x / 32768.0 for x in raw], w.getframerate()


def model(name, **kw):
    return qvoice.Qwen3TTSModel.from_pretrained(os.path.join(CACHE, name), threads=2, **kw)


def as_list(wav):
    return list(wav.tolist() if hasattr(wav, "tolist") else wav)


def assert_float32(tc, wav):
    """numpy float32 when numpy is importable (test_python.c also runs this with it blocked),
    else array('f')."""
    if qvoice._np is not None:
        tc.assertIsInstance(wav, qvoice._np.ndarray)
        tc.assertEqual(str(wav.dtype), "float32")
    else:
        tc.assertIsInstance(wav, array.array)
        tc.assertEqual(wav.typecode, "f")


class Library(unittest.TestCase):
    def test_version_matches_header(self):
        with open(os.path.join(REPO, "include", "qvoice.h")) as f:
            self.assertIn('#define QV_VERSION_STRING "%s"' % qvoice.version(), f.read())

    def test_installed_copy_is_used(self):
        # set by tests/unit/test_python.c for the pip-installed package
        if not os.environ.get("QVOICE_EXPECT_PACKAGED_LIB"):
            self.skipTest("not the pip-installed package")
        self.assertEqual(os.path.dirname(LIB.path), os.path.dirname(qvoice.__file__))

    def test_struct_layout_matches_c(self):
        """Every ctypes struct has the C size and each field the C offset."""
        lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "include/qvoice.h"',
                 'int main(void) {']
        expect = []
        for cname, cls in _capi.STRUCTS.items():
            lines.append('printf("%%zu\\n", sizeof(%s));' % cname)
            expect.append(_capi.ctypes.sizeof(cls))
            for f, _ in cls._fields_:
                lines.append('printf("%%zu\\n", offsetof(%s, %s));' % (cname, f))
                expect.append(getattr(cls, f).offset)
        lines.append("return 0; }")
        with tempfile.TemporaryDirectory() as d:
            exe = os.path.join(d, "layout")
            subprocess.run(["cc", "-I", REPO, "-x", "c", "-", "-o", exe],
                           input="\n".join(lines).encode(), check=True)
            got = [int(x) for x in subprocess.run([exe], stdout=subprocess.PIPE,
                                                  check=True).stdout.split()]
        self.assertEqual(got, expect)

    def test_status_names_match_c(self):
        """_capi.STATUS is enum qv_status, name for name, in order."""
        src = ('#include <stdio.h>\n#include "include/qvoice.h"\n'
               '#define N_(name, text) puts(#name);\n'
               'int main(void) { QV_STATUS_LIST(N_) return 0; }\n')
        with tempfile.TemporaryDirectory() as d:
            exe = os.path.join(d, "status")
            subprocess.run(["cc", "-I", REPO, "-x", "c", "-", "-o", exe], input=src.encode(),
                           check=True)
            got = subprocess.run([exe], stdout=subprocess.PIPE, check=True).stdout.split()
        self.assertEqual([x.decode() for x in got], _capi.STATUS)


class Loading(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cv = model("tiny-cv")

    def test_model_info(self):
        self.assertEqual(self.cv.model_type, "custom_voice")
        self.assertEqual(self.cv.sample_rate, 24000)
        self.assertIn("ryan", self.cv.get_supported_speakers())
        self.assertEqual(self.cv.get_supported_languages()[0], "auto")
        self.assertGreater(self.cv.generate_defaults["max_new_tokens"], 1)
        self.assertIn("repetition_penalty", self.cv.generate_defaults)

    def test_hf_loader_kwargs_accepted(self):
        m = model("tiny-vd", device_map="cpu", dtype=None, attn_implementation="sdpa")
        self.assertEqual(m.model_type, "voice_design")
        m.close()
        with self.assertRaises(ValueError):  # closed: no use after free
            m.get_supported_speakers()

    def test_load_errors(self):
        with tempfile.TemporaryDirectory() as hub:
            os.environ["HF_HUB_CACHE"] = hub
            try:
                with self.assertRaisesRegex(FileNotFoundError,
                                            "hf download Qwen/Qwen3-TTS-12Hz-0.6B-Base"):
                    qvoice.Qwen3TTSModel.from_pretrained("Qwen/Qwen3-TTS-12Hz-0.6B-Base")
            finally:
                del os.environ["HF_HUB_CACHE"]
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaises(qvoice.QvoiceError) as cm:
                qvoice.Qwen3TTSModel.from_pretrained(d)
            self.assertEqual(cm.exception.status, "QV_E_MODEL")
            self.assertIn(d, str(cm.exception))
        with self.assertRaises(TypeError):
            model("tiny-cv", trust_remote_code=True)
        with self.assertRaises(ValueError):
            model("tiny-cv", quant="q3")

    def test_hub_cache(self):
        """A hub id resolves in a local Hugging Face cache laid out as `hf download` leaves it:
        models--Org--Name/refs/main holds the commit, snapshots/COMMIT/ links into blobs/."""
        repo_id = "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice"
        commit = "0123456789abcdef0123456789abcdef01234567"
        saved = {k: os.environ.pop(k, None) for k in ("HF_HOME", "HF_HUB_CACHE")}
        try:
            with tempfile.TemporaryDirectory() as home:
                repo = os.path.join(home, "hub", "models--Qwen--Qwen3-TTS-12Hz-0.6B-CustomVoice")
                snap = os.path.join(repo, "snapshots", commit)
                os.makedirs(os.path.join(repo, "blobs"))
                os.makedirs(snap)
                os.makedirs(os.path.join(repo, "refs"))
                src = os.path.join(CACHE, "tiny-cv")
                for i, name in enumerate(sorted(os.listdir(src))):
                    blob = os.path.join(repo, "blobs", "%040x" % i)
                    os.symlink(os.path.join(src, name), blob)
                    os.symlink(os.path.relpath(blob, snap), os.path.join(snap, name))
                with open(os.path.join(repo, "refs", "main"), "w") as f:
                    f.write(commit)
                os.environ["HF_HOME"] = home
                m = qvoice.Qwen3TTSModel.from_pretrained(repo_id, local_files_only=True)
                self.assertEqual((m.model_type, m.model_dir), ("custom_voice", snap))
                m.close()
                os.environ.pop("HF_HOME")
                os.environ["HF_HUB_CACHE"] = os.path.join(home, "hub")
                m = qvoice.Qwen3TTSModel.from_pretrained(repo_id, revision=commit)
                self.assertEqual(m.model_dir, snap)
                m.close()
                with self.assertRaisesRegex(FileNotFoundError,
                                            "hf download %s --revision v9" % repo_id):
                    qvoice.Qwen3TTSModel.from_pretrained(repo_id, revision="v9")
        finally:
            for k, v in saved.items():
                os.environ.pop(k, None)
                if v is not None:
                    os.environ[k] = v

    def test_bad_generation_kwargs(self):
        with self.assertRaises(TypeError):
            self.cv.generate_custom_voice("Hi.", speaker="ryan", num_beams=2)
        with self.assertRaises(ValueError):
            self.cv.generate_custom_voice("Hi.", speaker="ryan", max_new_tokens=1)
        with self.assertRaises(ValueError):
            self.cv.generate_custom_voice("Hi.", speaker="ryan", non_streaming_mode=False)

    def test_wrong_model_type(self):
        with self.assertRaises(ValueError):
            self.cv.generate_voice_design("Hi.", instruct="A calm voice.")
        with self.assertRaisesRegex(ValueError, "clone_model"):
            self.cv.create_voice_clone_prompt(CLIP, ref_text=CLIP_TEXT)

    def test_batch_mismatch(self):
        with self.assertRaisesRegex(ValueError, "Batch size mismatch"):
            self.cv.generate_custom_voice(["a", "b", "c"], speaker=["ryan", "eric"])


@unittest.skipUnless(HAS_SYNTH, "libqvoice has no qv_synth_run yet")
class Synthesis(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cv = model("tiny-cv")

    def test_custom_voice_shapes_and_seed(self):
        wavs, sr = self.cv.generate_custom_voice("Hello there.", speaker="Ryan",
                                                 language="English", **SHORT)
        self.assertEqual(sr, 24000)
        self.assertIsInstance(wavs, list)
        self.assertEqual(len(wavs), 1)
        assert_float32(self, wavs[0])
        self.assertGreater(len(wavs[0]), 0)
        self.assertTrue(all(-1.0 <= x <= 1.0 for x in as_list(wavs[0])))
        again, _ = self.cv.generate_custom_voice("Hello there.", speaker="ryan",
                                                 language="english", **SHORT)
        self.assertEqual(as_list(again[0]), as_list(wavs[0]))
        other, _ = self.cv.generate_custom_voice("Hello there.", speaker="ryan",
                                                 max_new_tokens=6, seed=8)
        self.assertNotEqual(as_list(other[0]), as_list(wavs[0]))
        self.assertGreater(self.cv.last_stats["n_frames"], 0)

    def test_fresh_take_per_call(self):
        """No seed: each call is another take (its seed in last_stats); seed= repeats one."""
        kw = dict(max_new_tokens=6)
        a, _ = self.cv.generate_custom_voice("Hello there.", speaker="ryan", **kw)
        seed_a = self.cv.last_stats["seed"]
        b, _ = self.cv.generate_custom_voice("Hello there.", speaker="ryan", **kw)
        self.assertNotEqual(seed_a, self.cv.last_stats["seed"])
        self.assertNotEqual(as_list(a[0]), as_list(b[0]))
        again, _ = self.cv.generate_custom_voice("Hello there.", speaker="ryan", seed=seed_a, **kw)
        self.assertEqual(as_list(again[0]), as_list(a[0]))

    def test_list_is_one_batch_same_as_one_by_one(self):
        texts = ["One.", "Two words.", "Three is here.", "Four."]
        batch, _ = self.cv.generate_custom_voice(texts, speaker="eric", **SHORT)
        alone = [self.cv.generate_custom_voice(x, speaker="eric", **SHORT)[0][0] for x in texts]
        self.assertEqual([as_list(w) for w in batch], [as_list(w) for w in alone])

    def test_text_list(self):
        wavs, _ = self.cv.generate_custom_voice(["One.", "Two."], speaker="eric", **SHORT)
        self.assertEqual(len(wavs), 2)

    def test_stream_equals_generate(self):
        blocks = list(self.cv.stream_custom_voice("Streaming text.", speaker="ryan", **SHORT))
        self.assertGreater(len(blocks), 0)
        joined = [x for b in blocks for x in as_list(b)]
        wavs, _ = self.cv.generate_custom_voice("Streaming text.", speaker="ryan", **SHORT)
        self.assertEqual(joined, as_list(wavs[0]))

    def test_stream_closed_early(self):
        gen = self.cv.stream_custom_voice("Stop early.", speaker="ryan", max_new_tokens=40)
        next(gen)
        gen.close()  # cancels the synthesis; the model is usable right after
        wavs, _ = self.cv.generate_custom_voice("After.", speaker="ryan", **SHORT)
        self.assertGreater(len(wavs[0]), 0)

    def test_unknown_speaker(self):
        with self.assertRaises(ValueError) as cm:
            self.cv.generate_custom_voice("Hi.", speaker="nobody", **SHORT)
        self.assertIn("nobody", str(cm.exception))

    def test_markup(self):
        """Markup goes through the library's parser: a voice switch renders like a separate run
        of that speaker; a tag the 0.6B model cannot honour is a warning, an error when strict."""
        wavs, _ = self.cv.generate_custom_voice("[voice:serena] Hi.", speaker="ryan", **SHORT)
        alone, _ = self.cv.generate_custom_voice("Hi.", speaker="serena", **SHORT)
        self.assertEqual(as_list(wavs[0]), as_list(alone[0]))
        self.cv.generate_custom_voice("[sad] Hi.", speaker="ryan", **SHORT)
        self.assertIn("tag [sad] at character 0: not applied", self.cv.last_stats["warning"])
        with self.assertRaises(qvoice.QvoiceError) as cm:
            self.cv.generate_custom_voice("[sad] Hi.", speaker="ryan", strict_markup=True,
                                          **SHORT)
        self.assertIn("tag [sad]", str(cm.exception))
        with self.assertRaises(qvoice.QvoiceError):
            self.cv.generate_custom_voice("Hi.", speaker="ryan", style="grumpy", **SHORT)

    def test_library_rules(self):
        """The sampling range and the 0.6B CustomVoice instruct rule are the library's."""
        with self.assertRaises(ValueError) as cm:
            self.cv.generate_custom_voice("Hi.", speaker="ryan", temperature=50, **SHORT)
        self.assertIn("temperature: expected 0.001..10", str(cm.exception))
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            self.cv.generate_custom_voice("Hi.", speaker="ryan", instruct="Whisper.", **SHORT)
        self.assertTrue(any("instruct ignored" in str(x.message) for x in w))

    def test_write_audio_and_jobs(self):
        """write_wav/write_audio and run_jobs write through the library's one encoder: the job's
        WAV is the file speak's runner writes, and write_wav of the same samples matches it."""
        with tempfile.TemporaryDirectory() as d:
            job = {"text": "Hello there.", "speaker": "ryan", "output": os.path.join(d, "j.wav")}
            res = list(self.cv.run_jobs([job, "", "not json"], seed=3, max_new_tokens=6))
            self.assertEqual([r["line"] for r in res], [1, 3])
            self.assertTrue(res[0]["ok"] and not res[1]["ok"])
            self.assertIn("not valid JSON", res[1]["error"])
            wavs, _ = self.cv.generate_custom_voice("Hello there.", speaker="ryan", seed=3,
                                                    max_new_tokens=6)
            qvoice.write_wav(os.path.join(d, "w.wav"), wavs[0])
            with open(job["output"], "rb") as a, open(os.path.join(d, "w.wav"), "rb") as b:
                self.assertEqual(a.read(), b.read())
            qvoice.write_audio(os.path.join(d, "l.flac"), wavs[0], loudness=-20)
            self.assertGreater(os.path.getsize(os.path.join(d, "l.flac")), 0)
            with self.assertRaises(ValueError):
                qvoice.write_audio(os.path.join(d, "x.aiff"), wavs[0])

    def test_voice_design(self):
        vd = model("tiny-vd")
        wavs, sr = vd.generate_voice_design("Hi.", "A calm, low voice.", **SHORT)
        self.assertEqual((len(wavs), sr), (1, 24000))
        self.assertGreater(len(wavs[0]), 0)


@unittest.skipUnless(HAS_CLONE, "libqvoice has no qv_clone_run yet")
class Cloning(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.base = model("tiny-base")
        cls.tmp = tempfile.TemporaryDirectory()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_prompt_save(self):
        prompt = self.base.create_voice_clone_prompt(CLIP, ref_text=CLIP_TEXT, max_seconds=8)
        self.assertEqual(len(prompt), 1)
        self.assertTrue(prompt[0].icl_mode)
        path = prompt.save(os.path.join(self.tmp.name, "me.qvoice"))
        with open(path, "rb") as f:
            self.assertEqual(f.read(4), b"QVCE")
        v = qvoice.Voice(path)
        self.assertTrue(v.has_icl)

    def test_prompt_pickled_by_value(self):
        """A pickled prompt carries its voice: it speaks the same after the original is gone."""
        import pickle
        prompt = self.base.create_voice_clone_prompt(CLIP, ref_text=CLIP_TEXT, max_seconds=8)
        emb = as_list(prompt[0].ref_spk_embedding)
        self.assertEqual(len(emb), 64)  # tiny-base's x-vector
        want, _ = self.base.generate_voice_clone("Hi.", voice_clone_prompt=prompt, **SHORT)
        blob = pickle.dumps(prompt)
        old = prompt[0].path
        del prompt
        import gc
        gc.collect()
        self.assertFalse(os.path.exists(old))
        back = pickle.loads(blob)
        self.assertNotEqual(back[0].path, old)
        self.assertTrue(back[0].icl_mode)
        self.assertEqual(as_list(back[0].ref_spk_embedding), emb)
        got, _ = self.base.generate_voice_clone("Hi.", voice_clone_prompt=back, **SHORT)
        self.assertEqual(as_list(got[0]), as_list(want[0]))

    def test_icl_window(self):
        """The transcript must match the ICL span: the first 8 s fit CLIP_TEXT, the whole 30 s
        clip does not (refused with the numbers), unless ICL may fall back to the x-vector."""
        prompt = self.base.create_voice_clone_prompt(CLIP, ref_text=CLIP_TEXT,
                                                     icl_window=(0.0, 8.0))
        self.assertTrue(qvoice.Voice(prompt[0].path).has_icl)
        self.assertIsInstance(prompt[0].report, dict)
        # what the file holds: its ICL codes decoded (whole 80 ms frames of 1920 samples)
        ref, sr = self.base.reference_audio(prompt[0].path)
        self.assertEqual(sr, 24000)
        self.assertGreater(len(ref), 8 * 24000)
        self.assertEqual(len(ref) % 1920, 0)
        with self.assertRaises(ValueError) as cm:
            self.base.create_voice_clone_prompt(CLIP, ref_text=CLIP_TEXT)
        self.assertIn("transcript", str(cm.exception))
        fallback = self.base.create_voice_clone_prompt(CLIP, ref_text=CLIP_TEXT,
                                                       allow_xvector_fallback=True)
        self.assertFalse(qvoice.Voice(fallback[0].path).has_icl)
        with self.assertRaises(ValueError):
            self.base.create_voice_clone_prompt(CLIP, ref_text=CLIP_TEXT, icl_window="best")

    def test_icl_needs_ref_text(self):
        with self.assertRaisesRegex(ValueError, "ref_text is required"):
            self.base.create_voice_clone_prompt(CLIP)

    def test_samples_and_xvector_only(self):
        prompt = self.base.create_voice_clone_prompt(clip_samples(5), x_vector_only_mode=True)
        self.assertFalse(prompt[0].icl_mode)
        self.assertFalse(qvoice.Voice(prompt[0].path).has_icl)
        with self.assertRaises(qvoice.QvoiceError):  # no ICL codes to decode
            self.base.reference_audio(prompt[0].path)

    def test_bad_audio(self):
        missing = os.path.join(self.tmp.name, "missing.wav")
        with self.assertRaises(qvoice.QvoiceError) as cm:
            self.base.create_voice_clone_prompt(missing, x_vector_only_mode=True)
        self.assertEqual(cm.exception.status, "QV_E_AUDIO")
        self.assertIn(missing, str(cm.exception))  # the library's detail line

    def test_voice_not_found(self):
        with self.assertRaises(qvoice.QvoiceError) as cm:
            qvoice.Voice("no_such_voice_here")
        self.assertEqual(cm.exception.status, "QV_E_VOICE")
        self.assertIn("voices/no_such_voice_here.qvoice", str(cm.exception))

    @unittest.skipUnless(HAS_SYNTH, "libqvoice has no qv_synth_run yet")
    def test_clone_then_speak(self):
        cv = model("tiny-cv", clone_model=os.path.join(CACHE, "tiny-base"))
        prompt = cv.create_voice_clone_prompt(CLIP, ref_text=CLIP_TEXT, max_seconds=8)
        path = prompt.save(os.path.join(self.tmp.name, "cv.qvoice"))
        by_path, sr = cv.generate_voice_clone("Hello.", voice_clone_prompt=path, **SHORT)
        by_prompt, _ = cv.generate_voice_clone("Hello.", voice_clone_prompt=prompt, **SHORT)
        self.assertEqual(sr, 24000)
        self.assertEqual(as_list(by_path[0]), as_list(by_prompt[0]))
        wavs, _ = self.base.generate_voice_clone("Hello.", ref_audio=clip_samples(8),
                                                 ref_text=CLIP_TEXT, **SHORT)
        self.assertGreater(len(wavs[0]), 0)


if __name__ == "__main__":
    unittest.main()
