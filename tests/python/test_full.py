"""The qvoice Python package on the full-size synthetic 0.6B CustomVoice ($QVOICE_CACHE/q06b-cv):
load, then one short synthesis (skipped when libqvoice has no qv_synth_run yet)."""
import os
import unittest

import qvoice

CACHE = os.environ.get("QVOICE_CACHE", "cache")


class Full06B(unittest.TestCase):
    def test_load_and_speak(self):
        m = qvoice.Qwen3TTSModel.from_pretrained(os.path.join(CACHE, "q06b-cv"), threads=2)
        self.assertEqual((m.model_type, m.model_size), ("custom_voice", "0b6"))
        self.assertIn("ryan", m.get_supported_speakers())
        if not qvoice._capi.lib().has("qv_synth_run"):
            self.skipTest("libqvoice has no qv_synth_run yet")
        wavs, sr = m.generate_custom_voice("Hello.", speaker="ryan", language="English",
                                           max_new_tokens=4, seed=1)
        self.assertEqual((len(wavs), sr), (1, 24000))
        self.assertGreater(len(wavs[0]), 0)
        self.assertGreater(m.last_stats["n_frames"], 0)


if __name__ == "__main__":
    unittest.main()
