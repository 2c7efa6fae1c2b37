"""Python list input vs one call per text (make bench): 4 texts on one model, each capped at
FRAMES frames with one seed, first as 4 generate_custom_voice calls one by one, then as one list
(the library's batched streams, each text on its own synthesizer). Prints wall and CPU seconds of
each and the throughput ratio; the samples of both must be identical.

    python3 tests/bench/bench_python_batch.py MODEL_DIR [THREADS] [FRAMES]
"""
import os
import sys
import time

import qvoice

TEXTS = ["The old lighthouse keeper climbed the narrow stairs every evening.",
         "He lit the great lamp and watched the ships pass safely.",
         "Through the dark water below, the boats went home one by one.",
         "In the morning he slept, and the sea was quiet again."]


def timed(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def main():
    model_dir = sys.argv[1]
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    frames = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    m = qvoice.Qwen3TTSModel.from_pretrained(model_dir, threads=threads)
    speaker = m.get_supported_speakers()[0]
    kw = dict(speaker=speaker, language="english", max_new_tokens=frames + 1, seed=42)
    m.generate_custom_voice(TEXTS[0], **dict(kw, max_new_tokens=3))  # warm: mmap, decoder
    alone, w1, c1 = timed(lambda: [m.generate_custom_voice(t, **kw)[0][0] for t in TEXTS])
    batch, w4, c4 = timed(lambda: m.generate_custom_voice(TEXTS, **kw)[0])
    same = all(list(a) == list(b) for a, b in zip(alone, batch))
    audio = sum(len(a) for a in alone) / qvoice.SAMPLE_RATE
    print("python_batch_audio_s %.1f" % audio)
    print("python_one_by_one_s %.2f %.2f" % (w1, c1))
    print("python_list_s %.2f %.2f" % (w4, c4))
    print("python_list_ratio %.2f" % (w1 / w4))
    print("python_list_identical %s" % ("yes" if same else "NO"))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
