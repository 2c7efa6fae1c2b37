"""The official qwen_tts README's examples, as written, against qvoice: the hub ids resolve in a
local Hugging Face cache (hfcache, the tiny synthetic models in place of the real ones), the
package is imported under its official name, torch and soundfile are stand-ins (qvoice needs
neither: torch.bfloat16 is only passed through, sf.write writes qvoice's WAV), and the clip the
examples fetch by URL is served from tests/audio; the cache's generation_config.json caps a take at
40 frames (random weights never end speech). Then the prompt forms the official README
leaves to its example code: prompt items built from their fields and the dict form."""
import io
import json
import os
import sys
import tempfile
import types
import unittest
import urllib.request
import wave

import hfcache
import qvoice

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE = os.environ.get("QVOICE_CACHE", os.path.join(REPO, "cache"))
CLIP = os.path.join(REPO, "tests", "audio", "en_ohenry_chenevert.wav")
CLONE_URL = "https://qianwen-res.oss-cn-beijing.aliyuncs.com/Qwen3-TTS-Repo/clone.wav"
MODELS = {"CustomVoice": "tiny-cv", "VoiceDesign": "tiny-vd", "Base": "tiny-base"}

# The official README (QwenLM/Qwen3-TTS, "Python Package Usage"), each block as printed there.
CUSTOM_VOICE = '''
import torch
import soundfile as sf
from qwen_tts import Qwen3TTSModel

model = Qwen3TTSModel.from_pretrained(
    "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice",
    device_map="cuda:0",
    dtype=torch.bfloat16,
    attn_implementation="flash_attention_2",
)

# single inference
wavs, sr = model.generate_custom_voice(
    text="其实我真的有发现，我是一个特别善于观察别人情绪的人。",
    language="Chinese", # Pass `Auto` (or omit) for auto language adaptive; if the target language is known, set it explicitly.
    speaker="Vivian",
    instruct="用特别愤怒的语气说", # Omit if not needed.
)
sf.write("output_custom_voice.wav", wavs[0], sr)

# batch inference
wavs, sr = model.generate_custom_voice(
    text=[
        "其实我真的有发现，我是一个特别善于观察别人情绪的人。", 
        "She said she would be here by noon."
    ],
    language=["Chinese", "English"],
    speaker=["Vivian", "Ryan"],
    instruct=["", "Very happy."]
)
sf.write("output_custom_voice_1.wav", wavs[0], sr)
sf.write("output_custom_voice_2.wav", wavs[1], sr)
'''

VOICE_DESIGN = '''
import torch
import soundfile as sf
from qwen_tts import Qwen3TTSModel

model = Qwen3TTSModel.from_pretrained(
    "Qwen/Qwen3-TTS-12Hz-1.7B-VoiceDesign",
    device_map="cuda:0",
    dtype=torch.bfloat16,
    attn_implementation="flash_attention_2",
)

# single inference
wavs, sr = model.generate_voice_design(
    text="哥哥，你回来啦，人家等了你好久好久了，要抱抱！",
    language="Chinese",
    instruct="体现撒娇稚嫩的萝莉女声，音调偏高且起伏明显，营造出黏人、做作又刻意卖萌的听觉效果。",
)
sf.write("output_voice_design.wav", wavs[0], sr)

# batch inference
wavs, sr = model.generate_voice_design(
    text=[
      "哥哥，你回来啦，人家等了你好久好久了，要抱抱！",
      "It's in the top drawer... wait, it's empty? No way, that's impossible! I'm sure I put it there!"
    ],
    language=["Chinese", "English"],
    instruct=[
      "体现撒娇稚嫩的萝莉女声，音调偏高且起伏明显，营造出黏人、做作又刻意卖萌的听觉效果。",
      "Speak in an incredulous tone, but with a hint of panic beginning to creep into your voice."
    ]
)
sf.write("output_voice_design_1.wav", wavs[0], sr)
sf.write("output_voice_design_2.wav", wavs[1], sr)
'''

VOICE_CLONE = '''
import torch
import soundfile as sf
from qwen_tts import Qwen3TTSModel

model = Qwen3TTSModel.from_pretrained(
    "Qwen/Qwen3-TTS-12Hz-1.7B-Base",
    device_map="cuda:0",
    dtype=torch.bfloat16,
    attn_implementation="flash_attention_2",
)

ref_audio = "https://qianwen-res.oss-cn-beijing.aliyuncs.com/Qwen3-TTS-Repo/clone.wav"
ref_text  = "Okay. Yeah. I resent you. I love you. I respect you. But you know what? You blew it! And thanks to you."

wavs, sr = model.generate_voice_clone(
    text="I am solving the equation: x = [-b ± √(b²-4ac)] / 2a? Nobody can — it's a disaster (◍•͈⌔•͈◍), very sad!",
    language="English",
    ref_audio=ref_audio,
    ref_text=ref_text,
)
sf.write("output_voice_clone.wav", wavs[0], sr)
'''

VOICE_CLONE_REUSE = '''
prompt_items = model.create_voice_clone_prompt(
    ref_audio=ref_audio,
    ref_text=ref_text,
    x_vector_only_mode=False,
)
wavs, sr = model.generate_voice_clone(
    text=["Sentence A.", "Sentence B."],
    language=["English", "English"],
    voice_clone_prompt=prompt_items,
)
sf.write("output_voice_clone_1.wav", wavs[0], sr)
sf.write("output_voice_clone_2.wav", wavs[1], sr)
'''

# The prompt forms of the official API (qwen_tts/inference/qwen3_tts_model.py): items built from
# their fields, and the dict generate_voice_clone takes (qvoice adds ref_text for ICL entries:
# the official dict has no transcript).
PROMPT_FORMS = '''
from qwen_tts import VoiceClonePromptItem

items = model.create_voice_clone_prompt(ref_audio=ref_audio, ref_text=ref_text)
it = items[0]
rebuilt = VoiceClonePromptItem(ref_code=it.ref_code, ref_spk_embedding=it.ref_spk_embedding,
                               x_vector_only_mode=False, icl_mode=True, ref_text=it.ref_text)
wavs_items, sr = model.generate_voice_clone(text="Sentence A.", language="English",
                                            voice_clone_prompt=[rebuilt], seed=5)
voice_clone_prompt = dict(
    ref_code=[it.ref_code for it in items],
    ref_spk_embedding=[it.ref_spk_embedding for it in items],
    x_vector_only_mode=[it.x_vector_only_mode for it in items],
    icl_mode=[it.icl_mode for it in items],
    ref_text=[it.ref_text for it in items],
)
wavs_dict, sr = model.generate_voice_clone(text="Sentence A.", language="English",
                                           voice_clone_prompt=voice_clone_prompt, seed=5)
xvec_prompt = dict(ref_code=[None], ref_spk_embedding=[it.ref_spk_embedding],
                   x_vector_only_mode=[True], icl_mode=[False])
wavs_xvec, sr = model.generate_voice_clone(text="Sentence A.", language="English",
                                           voice_clone_prompt=xvec_prompt, seed=5)
'''


def clone_wav():
    """The examples' reference clip: 7 s of the bundled recording, as a WAV file's bytes."""
    with wave.open(CLIP) as w:
        frames, rate = w.readframes(7 * w.getframerate()), w.getframerate()
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(frames)
    return out.getvalue()


class OfficialReadme(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.saved_env = {k: os.environ.pop(k, None) for k in ("HF_HOME", "HF_HUB_CACHE")}
        cls.home = tempfile.TemporaryDirectory()
        for kind, name in MODELS.items():
            src = os.path.join(CACHE, name)
            with open(os.path.join(src, "generation_config.json")) as f:
                gen = json.load(f)
            gen["max_new_tokens"] = 40  # random weights never end speech: 3 s per take
            for size in ("0.6B", "1.7B"):
                hfcache.add_model(cls.home.name, "Qwen/Qwen3-TTS-12Hz-%s-%s" % (size, kind), src,
                                  {"generation_config.json": json.dumps(gen)})
        os.environ["HF_HOME"] = cls.home.name
        torch = types.ModuleType("torch")
        torch.bfloat16, torch.float16, torch.float32 = "bfloat16", "float16", "float32"
        sf = types.ModuleType("soundfile")
        sf.write = lambda path, data, samplerate: qvoice.write_wav(path, data, samplerate)
        cls.saved_mods = {k: sys.modules.get(k) for k in ("torch", "soundfile", "qwen_tts")}
        sys.modules.update(torch=torch, soundfile=sf, qwen_tts=qvoice)
        cls.urlopen, body = urllib.request.urlopen, clone_wav()

        def urlopen(url, *a, **kw):
            if url == CLONE_URL:
                return io.BytesIO(body)
            return cls.urlopen(url, *a, **kw)

        urllib.request.urlopen = urlopen
        cls.cwd = os.getcwd()
        cls.out = tempfile.TemporaryDirectory()
        os.chdir(cls.out.name)

    @classmethod
    def tearDownClass(cls):
        os.chdir(cls.cwd)
        urllib.request.urlopen = cls.urlopen
        for k, v in cls.saved_mods.items():
            sys.modules.pop(k, None)
            if v is not None:
                sys.modules[k] = v
        for k, v in cls.saved_env.items():
            os.environ.pop(k, None)
            if v is not None:
                os.environ[k] = v
        cls.out.cleanup()
        cls.home.cleanup()

    def run_example(self, *blocks):
        scope = {}
        for code in blocks:
            exec(compile(code, "README example", "exec"), scope)
        return scope

    def assert_wavs(self, *names):
        for name in names:
            with wave.open(name) as w:
                self.assertEqual((w.getframerate(), w.getnchannels()), (24000, 1))
                self.assertGreater(w.getnframes(), 0)

    def test_custom_voice(self):
        self.run_example(CUSTOM_VOICE)
        self.assert_wavs("output_custom_voice.wav", "output_custom_voice_1.wav",
                         "output_custom_voice_2.wav")

    def test_voice_design(self):
        self.run_example(VOICE_DESIGN)
        self.assert_wavs("output_voice_design.wav", "output_voice_design_1.wav",
                         "output_voice_design_2.wav")

    def test_voice_clone(self):
        s = self.run_example(VOICE_CLONE, VOICE_CLONE_REUSE)
        self.assert_wavs("output_voice_clone.wav", "output_voice_clone_1.wav",
                         "output_voice_clone_2.wav")
        self.assertTrue(s["prompt_items"][0].icl_mode)

    def test_prompt_forms(self):
        s = self.run_example(VOICE_CLONE, PROMPT_FORMS)
        as_list = [list(map(float, s[k][0])) for k in ("wavs_items", "wavs_dict", "wavs_xvec")]
        self.assertEqual(as_list[0], as_list[1])  # the dict speaks as the items do
        self.assertNotEqual(as_list[2], as_list[0])  # without ICL: another prompt


if __name__ == "__main__":
    unittest.main()
