"""The qvoice Python package on the tiny synthetic models ($QVOICE_CACHE/tiny-*): the ctypes
structs against the C compiler's layout, loading and its errors, the official names, keyword
handling and return shapes, streaming vs one-shot audio, cloning to a .qvoice and speaking it.
Synthesis and cloning tests skip when the loaded libqvoice lacks qv_synth_run / qv_clone_run."""
import array
import os
import subprocess
import sys
import tempfile
import unittest
import wave
import warnings

import hfcache
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
        commit = hfcache.COMMIT
        saved = {k: os.environ.pop(k, None) for k in ("HF_HOME", "HF_HUB_CACHE")}
        try:
            with tempfile.TemporaryDirectory() as home:
                snap = hfcache.add_model(home, repo_id, os.path.join(CACHE, "tiny-cv"))
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
        """An unknown keyword is a TypeError naming it, on every entry point (one text, a list
        run as a batch, a stream, a jobs run), before anything is synthesized."""
        calls = [lambda **k: self.cv.generate_custom_voice("Hi.", speaker="ryan", **k),
                 lambda **k: self.cv.generate_custom_voice(["Hi.", "Ho."], speaker="ryan", **k),
                 lambda **k: next(self.cv.stream_custom_voice("Hi.", speaker="ryan", **k)),
                 lambda **k: list(self.cv.run_jobs([], **k))]
        for call in calls:
            with self.assertRaisesRegex(TypeError, "'num_beams'"):
                call(num_beams=2, **SHORT)
            with self.assertRaisesRegex(TypeError, "'temprature'"):  # a misspelt official one
                call(temprature=0.5, **SHORT)
        with self.assertRaises(ValueError):
            self.cv.generate_custom_voice("Hi.", speaker="ryan", max_new_tokens=1)
        with self.assertRaises(ValueError):
            self.cv.generate_custom_voice("Hi.", speaker="ryan", non_streaming_mode=False)

    def test_official_generation_kwargs(self):
        """Every generation keyword of the official package is taken and honoured: with both
        samplers off (do_sample, subtalker_dosample False) the seed no longer matters; with them
        on, it does."""
        official = dict(do_sample=True, top_k=50, top_p=1.0, temperature=0.9,
                        repetition_penalty=1.05, subtalker_dosample=True, subtalker_top_k=50,
                        subtalker_top_p=1.0, subtalker_temperature=0.9, max_new_tokens=6)
        self.assertEqual(set(official) | {"seed"}, set(qvoice._GEN_KWARGS))
        say = lambda **k: self.cv.generate_custom_voice("Hi.", speaker="ryan", **k)[0][0]
        a, b = say(seed=1, **official), say(seed=2, **official)
        self.assertNotEqual(list(a), list(b))
        greedy = dict(official, do_sample=False, subtalker_dosample=False)
        self.assertEqual(list(say(seed=1, **greedy)), list(say(seed=2, **greedy)))

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

    def test_quant(self):
        """quant="int8" and "q4" run the library's quantized views: the same length, other
        samples than bf16 (lossy weights), repeatable."""
        want, _ = self.cv.generate_custom_voice("Hello there.", speaker="ryan", **SHORT)
        for q in ("int8", "q4"):
            m = model("tiny-cv", quant=q)
            a, _ = m.generate_custom_voice("Hello there.", speaker="ryan", **SHORT)
            b, _ = m.generate_custom_voice("Hello there.", speaker="ryan", **SHORT)
            self.assertEqual(len(a[0]), len(want[0]))
            self.assertNotEqual(as_list(a[0]), as_list(want[0]))
            self.assertEqual(as_list(a[0]), as_list(b[0]))
            m.close()

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

    def test_speed(self):
        """speed=2: the same take in half the samples (pitch-preserving stretch); 0.25..4 only."""
        kw = dict(max_new_tokens=20, seed=3)
        one, _ = self.cv.generate_custom_voice("Hello there.", speaker="ryan", **kw)
        two, _ = self.cv.generate_custom_voice("Hello there.", speaker="ryan", speed=2, **kw)
        self.assertEqual(len(two[0]), (len(one[0]) + 1) // 2)
        with self.assertRaises(ValueError):
            self.cv.generate_custom_voice("Hello there.", speaker="ryan", speed=5, **kw)

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

    def test_script(self):
        """speak --script in Python: one take whose lines switch speaker as the markup the
        library makes of it, a progress call per script line, bad lines named."""
        script = "# a comment\nryan: Hello there.\n\nserena: [sad] Hi.\neric: Bye.\n"
        lines = []
        wavs, sr = self.cv.speak_script(script, on_line=lambda *a: lines.append(a), **SHORT)
        self.assertEqual((len(wavs), sr), (1, 24000))
        self.assertEqual(lines, [(2, 1, 3), (4, 2, 3), (5, 3, 3)])
        self.assertIn("tag [sad]", self.cv.last_stats["warning"])
        self.assertEqual(self.cv.last_stats["n_chunks"], 3)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "show.txt")
            with open(path, "w") as f:
                f.write(script)
            again, _ = self.cv.speak_script(path, **SHORT)
            blocks = list(self.cv.stream_script(path, **SHORT))
        self.assertEqual(as_list(again[0]), as_list(wavs[0]))
        self.assertEqual([x for b in blocks for x in as_list(b)], as_list(wavs[0]))
        def stop(*a):
            raise KeyboardInterrupt

        with self.assertRaises(KeyboardInterrupt):  # on_line's exception ends the take
            self.cv.speak_script(script, on_line=stop, **SHORT)
        with self.assertRaisesRegex(ValueError, "script line 2"):
            self.cv.speak_script("ryan: fine.\nno speaker here\n", **SHORT)
        with self.assertRaises(qvoice.QvoiceError):
            self.cv.speak_script("ryan: [sad] Hi.\n", strict_markup=True, **SHORT)

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
            # the same provenance as the job's: this model, the preset speaker (docs/provenance.md)
            qvoice.write_wav(os.path.join(d, "w.wav"), wavs[0], model=self.cv,
                             voice="speaker:ryan")
            with open(job["output"], "rb") as a, open(os.path.join(d, "w.wav"), "rb") as b:
                self.assertEqual(a.read(), b.read())
            self.assertEqual(len(self.cv.fingerprint), 64)
            with open(job["output"], "rb") as a:
                head = a.read(4096)
            self.assertIn(b"model_fingerprint=" + self.cv.fingerprint.encode(), head)
            self.assertIn(b"voice_id=speaker:ryan\n", head)
            qvoice.write_audio(os.path.join(d, "l.flac"), wavs[0], loudness=-20)
            self.assertGreater(os.path.getsize(os.path.join(d, "l.flac")), 0)
            with self.assertRaises(ValueError):
                qvoice.write_audio(os.path.join(d, "x.aiff"), wavs[0])
            # aac by name (ADTS behind an ID3v2 tag, through libavcodec): the bytes of the
            # library's encoder, as speak -o x.aac writes them
            qvoice.write_audio(os.path.join(d, "a.out"), wavs[0], "aac", model=self.cv,
                               voice="speaker:ryan")
            with open(os.path.join(d, "a.out"), "rb") as a:
                head = a.read()
            self.assertTrue(head.startswith(b"ID3\x04"))
            self.assertIn(b"voice_id=speaker:ryan", head)
            tag = 10 + (head[6] << 21 | head[7] << 14 | head[8] << 7 | head[9])
            self.assertEqual(head[tag:tag + 2], b"\xff\xf1")  # the first ADTS frame

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
        self.assertEqual(as_list(v.xvector), as_list(prompt[0].ref_spk_embedding))
        import hashlib  # the voice id is the file's SHA-256, for a Voice, the file and the item
        with open(path, "rb") as f:
            self.assertEqual(v.id, hashlib.sha256(f.read()).hexdigest())
        self.assertEqual(qvoice._voice_id(prompt[0]), v.id)
        self.assertEqual(qvoice._voice_id(path), v.id)

    def test_prompt_item_fields(self):
        """The official item's fields, arrays (NumPy when importable, else lists), no file."""
        (item,) = self.base.create_voice_clone_prompt(CLIP, ref_text=CLIP_TEXT, max_seconds=8)
        self.assertEqual((item.x_vector_only_mode, item.icl_mode), (False, True))
        self.assertEqual(len(item.ref_spk_embedding), 64)  # tiny-base's x-vector
        codes = item.ref_code
        self.assertGreater(len(codes), 10)
        if qvoice._np is not None:
            self.assertEqual((codes.shape[1], str(codes.dtype)), (16, "int32"))
            self.assertEqual(str(item.ref_spk_embedding.dtype), "float32")
        else:
            self.assertIsInstance(codes, list)
            self.assertTrue(all(len(f) == 16 for f in codes))
        self.assertTrue(all(0 <= c < 2048 for f in as_list(codes) for c in as_list(f)))
        self.assertTrue(item.ref_text)
        self.assertFalse(any(isinstance(v, str) and os.path.exists(v)
                             for v in vars(item).values()))  # no file path inside
        (xo,) = self.base.create_voice_clone_prompt(CLIP, x_vector_only_mode=True, max_seconds=8)
        self.assertEqual((xo.x_vector_only_mode, xo.icl_mode, xo.ref_code), (True, False, None))

    def test_prompt_pickled_by_value(self):
        """A pickled prompt carries its voice: unpickled in another process, it speaks the same
        samples."""
        import pickle
        prompt = self.base.create_voice_clone_prompt(CLIP, ref_text=CLIP_TEXT, max_seconds=8)
        want, _ = self.base.generate_voice_clone("Hi.", voice_clone_prompt=prompt, **SHORT)
        with tempfile.TemporaryDirectory() as d:
            blob, out = os.path.join(d, "prompt.pkl"), os.path.join(d, "wav.pkl")
            with open(blob, "wb") as f:
                pickle.dump(prompt, f)
            code = ("import pickle, sys, qvoice\n"
                    "prompt = pickle.load(open(sys.argv[1], 'rb'))\n"
                    "m = qvoice.Qwen3TTSModel.from_pretrained(sys.argv[2], threads=2)\n"
                    "wavs, _ = m.generate_voice_clone('Hi.', voice_clone_prompt=prompt, "
                    "max_new_tokens=6, seed=7)\n"
                    "w = wavs[0]\n"
                    "pickle.dump([float(x) for x in w], open(sys.argv[3], 'wb'))\n")
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(
                [os.path.dirname(os.path.dirname(qvoice.__file__))] +
                [p for p in [os.environ.get("PYTHONPATH")] if p]))
            subprocess.run([sys.executable, "-c", code, blob, os.path.join(CACHE, "tiny-base"),
                            out], check=True, env=env)
            with open(out, "rb") as f:
                got = pickle.load(f)
        self.assertEqual(got, [float(x) for x in as_list(want[0])])

    def test_official_dict_and_items_from_arrays(self):
        """The official dict form and items built from arrays speak as the cloned prompt does
        on the Base model (ICL: codes + transcript; x-vector only: the embedding)."""
        (item,) = self.base.create_voice_clone_prompt(CLIP, ref_text=CLIP_TEXT, max_seconds=8)
        want, _ = self.base.generate_voice_clone("Hi.", voice_clone_prompt=[item], **SHORT)
        made = qvoice.VoiceClonePromptItem(item.ref_code, item.ref_spk_embedding, False, True,
                                           item.ref_text)
        got, _ = self.base.generate_voice_clone("Hi.", voice_clone_prompt=[made], **SHORT)
        self.assertEqual(as_list(got[0]), as_list(want[0]))
        lists = {"ref_code": [[as_list(f) for f in as_list(item.ref_code)]],
                 "ref_spk_embedding": [as_list(item.ref_spk_embedding)],
                 "x_vector_only_mode": [False], "icl_mode": [True], "ref_text": [item.ref_text]}
        got, _ = self.base.generate_voice_clone("Hi.", voice_clone_prompt=lists, **SHORT)
        self.assertEqual(as_list(got[0]), as_list(want[0]))
        xo = {"ref_code": [None], "ref_spk_embedding": [item.ref_spk_embedding],
              "x_vector_only_mode": [True], "icl_mode": [False]}
        a, _ = self.base.generate_voice_clone("Hi.", voice_clone_prompt=xo, **SHORT)
        whole = qvoice.VoiceClonePromptItem(x_vector_only_mode=True, voice_bytes=item.voice_bytes)
        b, _ = self.base.generate_voice_clone("Hi.", voice_clone_prompt=whole, **SHORT)
        self.assertEqual(as_list(a[0]), as_list(b[0]))
        self.assertNotEqual(as_list(a[0]), as_list(want[0]))  # no ICL: another prompt
        with self.assertRaisesRegex(ValueError, "entry 0 is icl_mode without its transcript"):
            self.base.generate_voice_clone("Hi.", voice_clone_prompt=dict(lists, ref_text=[None]))
        with self.assertRaisesRegex(ValueError, "Batch size mismatch"):
            self.base.generate_voice_clone("Hi.", voice_clone_prompt=dict(xo, icl_mode=[]))
        with self.assertRaisesRegex(ValueError, "unknown field"):
            self.base.generate_voice_clone("Hi.", voice_clone_prompt=dict(xo, speaker=["x"]))
        bad = [[5000] * 16]
        with self.assertRaises(qvoice.QvoiceError) as cm:
            qvoice.VoiceClonePromptItem(bad, item.ref_spk_embedding, False, True, "x").voice()
        self.assertIn("outside [0, 2048)", str(cm.exception))
        with self.assertRaisesRegex(ValueError, "frames of 16"):
            qvoice.Voice.from_parts(item.ref_spk_embedding, [[1, 2, 3]], "x")
        with self.assertRaises(qvoice.QvoiceError) as cm:
            qvoice.Voice.from_bytes(b"QVCE not a voice", "junk")
        self.assertEqual(cm.exception.status, "QV_E_VOICE")
        self.assertIn("junk", str(cm.exception))

    @unittest.skipUnless(os.access(os.path.join(REPO, "bin", "voicefmt"), os.X_OK), "no bin/voicefmt")
    def test_palette(self):
        """A voice's palette is read (Voice.styles) and used by style= and markup tags; a style
        nothing can apply raises."""
        (item,) = self.base.create_voice_clone_prompt(CLIP, x_vector_only_mode=True,
                                                      max_seconds=8)
        path = item.save(os.path.join(self.tmp.name, "pal.qvoice"))
        direction = array.array("f", [1.0] + [0.0] * 63)
        with open(os.path.join(self.tmp.name, "sad.bin"), "wb") as f:
            direction.tofile(f)
        subprocess.run([os.path.join(REPO, "bin", "voicefmt"), "palette", "add", path, "--name",
                        "sad", "--direction", os.path.join(self.tmp.name, "sad.bin"),
                        "--strength", "0.5"], check=True, stdout=subprocess.DEVNULL)
        voice = qvoice.Voice(path)
        self.assertEqual(voice.styles, {"sad": {"kind": "direction", "strength": 0.5}})
        self.assertEqual(qvoice.Voice(item.save(os.path.join(self.tmp.name, "p.qvoice"))).styles,
                         {})
        plain, _ = self.base.generate_voice_clone("Hi.", voice_clone_prompt=voice, **SHORT)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the palette applies: no warning
            sad, _ = self.base.generate_voice_clone("Hi.", voice_clone_prompt=voice, style="sad",
                                                    **SHORT)
            tagged, _ = self.base.generate_voice_clone("[sad]Hi.", voice_clone_prompt=voice,
                                                       **SHORT)
        self.assertNotEqual(as_list(sad[0]), as_list(plain[0]))
        self.assertEqual(as_list(tagged[0]), as_list(sad[0]))
        weaker, _ = self.base.generate_voice_clone("Hi.", voice_clone_prompt=voice, style="sad",
                                                   style_strength=0.1, **SHORT)
        self.assertNotEqual(as_list(weaker[0]), as_list(sad[0]))
        with self.assertRaisesRegex(qvoice.QvoiceError, "happy"):
            self.base.generate_voice_clone("Hi.", voice_clone_prompt=voice, style="happy",
                                           **SHORT)
        # a generic direction (speak --style-dir) on a voice without a palette: the same shift
        for d in (os.path.join(self.tmp.name, "sad.bin"), direction):
            generic, _ = self.base.generate_voice_clone("Hi.", voice_clone_prompt=item,
                                                        style="sad", style_strength=0.5,
                                                        style_dirs={"sad": d}, **SHORT)
            self.assertEqual(as_list(generic[0]), as_list(sad[0]))

    def test_icl_window(self):
        """The transcript must match the ICL span: the first 8 s fit CLIP_TEXT, the whole 30 s
        clip does not (refused with the numbers), unless ICL may fall back to the x-vector."""
        prompt = self.base.create_voice_clone_prompt(CLIP, ref_text=CLIP_TEXT,
                                                     icl_window=(0.0, 8.0))
        self.assertTrue(prompt[0].voice().has_icl)
        self.assertIsInstance(prompt[0].report, dict)
        # what the file holds: its ICL codes decoded (whole 80 ms frames of 1920 samples)
        ref, sr = self.base.reference_audio(prompt[0].voice())
        self.assertEqual(sr, 24000)
        self.assertGreater(len(ref), 8 * 24000)
        self.assertEqual(len(ref) % 1920, 0)
        with self.assertRaises(ValueError) as cm:
            self.base.create_voice_clone_prompt(CLIP, ref_text=CLIP_TEXT)
        self.assertIn("transcript", str(cm.exception))
        fallback = self.base.create_voice_clone_prompt(CLIP, ref_text=CLIP_TEXT,
                                                       allow_xvector_fallback=True)
        self.assertFalse(fallback[0].voice().has_icl)
        self.assertEqual((fallback[0].icl_mode, fallback[0].ref_code), (False, None))
        with self.assertRaises(ValueError):
            self.base.create_voice_clone_prompt(CLIP, ref_text=CLIP_TEXT, icl_window="best")

    def test_icl_needs_ref_text(self):
        with self.assertRaisesRegex(ValueError, "ref_text is required"):
            self.base.create_voice_clone_prompt(CLIP)

    def test_samples_and_xvector_only(self):
        prompt = self.base.create_voice_clone_prompt(clip_samples(5), x_vector_only_mode=True)
        self.assertFalse(prompt[0].icl_mode)
        self.assertFalse(prompt[0].voice().has_icl)
        with self.assertRaises(qvoice.QvoiceError):  # no ICL codes to decode
            self.base.reference_audio(prompt[0].voice())

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
