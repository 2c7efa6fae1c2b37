// openai_speech.mjs — the official openai package against qvoice-server (run by test_server.c).
// usage: node openai_speech.mjs BASE_URL MODE [OUT]
//   MODE bad-voice: expects a 400 BadRequestError with code voice_not_found
//   MODE wav:       audio.speech.create, whole body -> OUT
//   MODE stream:    stream_format "audio", body read chunk by chunk -> OUT; prints the chunk count
//   MODE sse:       stream_format "sse", speech.audio.delta events decoded -> OUT; checks the done event
//                   (its usage.input_tokens: 7 tokens) and that each event's `event:` line names its type
//   MODE ref:       vLLM-Omni's per-request clone: ref_audio (a data URL of REF_WAV) with
//                   x_vector_only_mode, pcm -> OUT
//   MODE speed:     OpenAI's speed 2 (time-stretched), pcm -> OUT
//   MODE aac, aac-stream, aac-sse: response_format "aac" whole, streamed (stream_format "audio"),
//                   and as SSE deltas (vLLM-Omni's stream: true; decoded and joined) -> OUT
//   MODE batch:     vLLM-Omni's POST /v1/audio/speech/batch through the package's client.post:
//                   two items (the second with an unknown voice: its own error), the first's
//                   audio decoded -> OUT
// Exit 0 when the call behaved as expected, 1 otherwise (one line on stderr says why).
import fs from 'node:fs';
import OpenAI from 'openai';

const [base, mode, out, refWav] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base + '/v1', apiKey: process.env.QV_API_KEY || 'none', maxRetries: 0, timeout: 60000 });
// max_seconds (a qvoice extension, passed through by the package) keeps the tiny test model short
const req = { model: 'tts-1', voice: 'ryan', input: 'Hello from the openai package.', response_format: 'wav', max_seconds: 2, seed: 3 };

function fail(msg) { console.error('openai_speech: ' + msg); process.exit(1); }

try {
  if (mode === 'bad-voice') {
    try {
      await client.audio.speech.create({ ...req, voice: 'no-such-voice' });
    } catch (e) {
      if (e instanceof OpenAI.BadRequestError && e.status === 400 && e.code === 'voice_not_found') process.exit(0);
      fail(`unexpected error ${e.status} ${e.code}: ${e.message}`);
    }
    fail('no error for an unknown voice');
  } else if (mode === 'wav') {
    const r = await client.audio.speech.create(req);
    fs.writeFileSync(out, Buffer.from(await r.arrayBuffer()));
  } else if (mode === 'stream') {
    const r = await client.audio.speech.create({ ...req, stream_format: 'audio' });
    const parts = [];
    for await (const chunk of r.body) parts.push(Buffer.from(chunk));
    fs.writeFileSync(out, Buffer.concat(parts));
    console.log(`chunks ${parts.length}`);
  } else if (mode === 'sse') {
    const r = await client.audio.speech.create({ ...req, response_format: 'pcm', stream_format: 'sse' });
    const text = Buffer.from(await r.arrayBuffer()).toString();
    const events = text.split('\n\n').filter((e) => e.trim()).map((block) => {
      const lines = block.split('\n');
      const name = lines.find((l) => l.startsWith('event: '));
      const data = lines.find((l) => l.startsWith('data: '));
      const e = JSON.parse(data.slice(6));
      if (!name || name.slice(7) !== e.type) fail(`event line ${name} for type ${e.type}`);
      return e;
    });
    const deltas = events.filter((e) => e.type === 'speech.audio.delta');
    const done = events.filter((e) => e.type === 'speech.audio.done');
    if (!deltas.length || done.length !== 1 || events[events.length - 1] !== done[0]) fail('expected deltas then one done event');
    if (!(done[0].usage && done[0].usage.output_tokens > 0)) fail('done event without usage');
    // the input's tokens with the model's tokenizer (7), not its 30 characters
    if (done[0].usage.input_tokens !== 7) fail(`usage.input_tokens ${done[0].usage.input_tokens}, expected 7`);
    // vLLM-Omni's split: all text, no reference frames for a preset speaker
    const d = done[0].usage.input_token_details;
    if (!d || d.text_tokens !== 7 || d.audio_tokens !== 0) fail(`input_token_details ${JSON.stringify(d)}`);
    fs.writeFileSync(out, Buffer.concat(deltas.map((e) => Buffer.from(e.audio, 'base64'))));
    console.log(`deltas ${deltas.length}`);
  } else if (mode === 'ref') {
    const ref = 'data:audio/wav;base64,' + fs.readFileSync(refWav).toString('base64');
    const r = await client.audio.speech.create({ model: 'tts-1', input: 'Hello there.', response_format: 'pcm',
      ref_audio: ref, x_vector_only_mode: true, task_type: 'Base', seed: 7, max_seconds: 1 });
    fs.writeFileSync(out, Buffer.from(await r.arrayBuffer()));
  } else if (mode === 'aac' || mode === 'aac-stream') {
    const r = await client.audio.speech.create({ ...req, response_format: 'aac', ...(mode === 'aac' ? {} : { stream_format: 'audio' }) });
    if (r.headers.get('content-type') !== 'audio/aac') fail(`content-type ${r.headers.get('content-type')}`);
    fs.writeFileSync(out, Buffer.from(await r.arrayBuffer()));
  } else if (mode === 'aac-sse') {
    const r = await client.audio.speech.create({ ...req, response_format: 'aac', stream: true });
    const text = Buffer.from(await r.arrayBuffer()).toString();
    const deltas = text.split('\n\n').map((b) => b.split('\n').find((l) => l.startsWith('data: ')))
      .filter(Boolean).map((d) => JSON.parse(d.slice(6))).filter((e) => e.type === 'speech.audio.delta');
    if (!deltas.length) fail('no speech.audio.delta event');
    fs.writeFileSync(out, Buffer.concat(deltas.map((e) => Buffer.from(e.audio, 'base64'))));
  } else if (mode === 'speed') {
    const r = await client.audio.speech.create({ ...req, response_format: 'pcm', speed: 2 });
    fs.writeFileSync(out, Buffer.from(await r.arrayBuffer()));
  } else if (mode === 'batch') {
    const r = await client.post('/audio/speech/batch', { body: { voice: 'ryan', seed: 3, max_seconds: 2,
      items: [{ input: req.input }, { input: 'Who?', voice: 'no-such-voice' }] } });
    if (r.total !== 2 || r.succeeded !== 1 || r.failed !== 1) fail(`batch counts ${JSON.stringify(r)}`);
    const [a, b] = r.results;
    if (a.status !== 'success' || a.media_type !== 'audio/wav' || !(a.usage.input_tokens > 0)) fail('first item');
    if (b.status !== 'error' || !b.error.includes('no-such-voice')) fail('second item: ' + JSON.stringify(b));
    fs.writeFileSync(out, Buffer.from(a.audio_data, 'base64'));
  } else {
    fail('unknown mode ' + mode);
  }
} catch (e) {
  fail(`${e.status || ''} ${e.message}`);
}
