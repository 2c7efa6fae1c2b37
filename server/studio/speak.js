// speak.js — the Speak page. A take is streamed as server-sent events (stream_format "sse",
// response_format "pcm": each speech.audio.delta carries 16-bit mono 24 kHz samples) and each
// block is scheduled on Web Audio as it arrives, so playback starts with the first decoded audio;
// the waveform is drawn as it comes, and speech.progress events give the parts of the text done
// (the server's chunks: whole sentences, packed up to 200 characters).
// Stop aborts the fetch: the server sees the disconnect and cancels the synthesis. Style, its
// strength and strict markup go to the server as style, style_strength and strict_markup.
import { $, api, errorText, saveBlob, wavBlob, state, onVoices } from './common.js';

const RATE = 24000;
let ctx = null;        // one AudioContext, made on the first Speak (a user gesture)
let current = null;    // the take being streamed
let nTakes = 0;

function instructionRule() {
  const m = state.models[0];
  const ok = m && (m.type === 'voice_design' || (m.type === 'custom_voice' && m.size === '1b7'));
  const input = $('speak-instruction');
  input.disabled = !ok;
  $('speak-instruction-why').textContent = ok ? ''
    : `Disabled: the served model ${m ? m.id + ' (' + m.type + ', ' + m.size + ')' : ''} does not ` +
      'follow instructions; only the 1.7B CustomVoice and VoiceDesign models do.';
}

function fillVoices() {
  const sel = $('speak-voice');
  const keep = sel.value;
  sel.replaceChildren();
  const group = (label, items) => {
    if (!items.length) return;
    const g = document.createElement('optgroup');
    g.label = label;
    for (const [value, text] of items) {
      const o = document.createElement('option');
      o.value = value;
      o.textContent = text;
      g.append(o);
    }
    sel.append(g);
  };
  group('Library', state.voices.map((v) => [v.id, v.name || v.id.slice(0, 12)]));
  group('Presets', state.presets.map((p) => [p, p]));
  if ([...sel.options].some((o) => o.value === keep)) sel.value = keep;
}

// The Style choices: the selected library voice's palette (its styles), else none.
function fillStyles() {
  const sel = $('speak-style'), keep = sel.value;
  const v = state.voices.find((x) => x.id === $('speak-voice').value);
  const names = (v && v.styles) || [];
  const none = document.createElement('option');
  none.value = '';
  none.textContent = '(none)';
  sel.replaceChildren(none, ...names.map((n) => {
    const o = document.createElement('option');
    o.value = o.textContent = n;
    return o;
  }));
  if (names.includes(keep)) sel.value = keep;
  sel.disabled = !names.length;
  $('speak-style-why').textContent = names.length ? ''
    : v ? 'This voice has no styles in its palette (voicefmt palette add); markup tags still work.'
      : 'Preset speakers have no palette; markup tags still work.';
  $('speak-style-strength').disabled = !sel.value;
}

function fillLanguages() {
  const sel = $('speak-language');
  const langs = (state.models[0] && state.models[0].languages) || ['auto'];
  sel.replaceChildren(...langs.map((l) => {
    const o = document.createElement('option');
    o.value = o.textContent = l;
    return o;
  }));
  $('clone-language').replaceChildren(...[...sel.options].map((o) => o.cloneNode(true)));
}

function request(format, streamed) {
  const b = { input: $('speak-text').value, voice: $('speak-voice').value,
              language: $('speak-language').value, response_format: format };
  if (streamed) b.stream_format = 'sse';
  const instr = $('speak-instruction');
  if (!instr.disabled && instr.value.trim()) b.instructions = instr.value.trim();
  if ($('speak-style').value) b.style = $('speak-style').value;
  if ($('speak-strict').checked) b.strict_markup = true;
  const num = (id, key, int) => {
    const v = $(id).value;
    if (v !== '') b[key] = int ? parseInt(v, 10) : parseFloat(v);
  };
  num('speak-seed', 'seed', true);
  num('speak-temperature', 'temperature');
  num('speak-top-k', 'top_k', true);
  num('speak-top-p', 'top_p');
  num('speak-max-seconds', 'max_seconds');
  if (b.style) num('speak-style-strength', 'style_strength');
  return b;
}

// ---- waveform ---------------------------------------------------------------------------------

function draw(take) {
  const cv = $('speak-wave'), g = cv.getContext('2d');
  const w = cv.width, h = cv.height;
  g.fillStyle = '#10141c';
  g.fillRect(0, 0, w, h);
  const all = take.floats;
  const n = all.length;
  const span = Math.max(n, RATE * 4); // at least 4 s wide, then it scales to the take
  g.fillStyle = '#6fb3ff';
  for (let x = 0; x < w; x++) {
    const a = Math.floor((x * span) / w), b = Math.min(n, Math.floor(((x + 1) * span) / w));
    if (a >= n) break;
    let lo = 0, hi = 0;
    for (let i = a; i < b; i++) {
      const s = all[i];
      if (s < lo) lo = s;
      if (s > hi) hi = s;
    }
    g.fillRect(x, h / 2 - hi * h / 2, 1, Math.max(1, (hi - lo) * h / 2));
  }
  if (ctx && take.t0 !== null) { // playhead
    const x = ((ctx.currentTime - take.t0) * RATE * w) / span;
    g.fillStyle = '#f0b400';
    g.fillRect(Math.min(w - 1, Math.max(0, x)), 0, 2, h);
  }
}

function animate(take) {
  draw(take);
  if (take === current || (ctx && take.t0 !== null && ctx.currentTime < take.tEnd))
    requestAnimationFrame(() => animate(take));
}

// ---- a take ----------------------------------------------------------------------------------

function growFloats(take, f) {
  const next = new Float32Array(take.floats.length + f.length);
  next.set(take.floats);
  next.set(f, take.floats.length);
  take.floats = next;
}

async function speak() {
  $('speak-error').textContent = '';
  if (!ctx) ctx = new AudioContext({ sampleRate: RATE });
  if (ctx.state === 'suspended') await ctx.resume();
  const body = request('pcm', true);
  const format = $('speak-format').value;
  const voice = $('speak-voice').selectedOptions[0];
  const take = { n: ++nTakes, body, format, voiceLabel: voice ? voice.textContent : body.voice, pcm: [], floats: new Float32Array(0), sources: [],
                 t0: null, tEnd: 0, clickMs: performance.now(), firstMs: null, abort: new AbortController(),
                 odd: null, stopped: false };
  current = take;
  $('speak').disabled = true;
  $('speak-stop').disabled = false;
  $('speak-status').textContent = 'synthesizing…';
  $('speak-progress').hidden = true;
  $('speak-warning').textContent = '';
  animate(take);
  let r;
  try {
    r = await api('/v1/audio/speech', { method: 'POST', headers: { 'Content-Type': 'application/json' },
                                        body: JSON.stringify(body), signal: take.abort.signal });
    if (!r.ok) throw new Error(await errorText(r));
    await readEvents(r.body.getReader(), take);
    take.streamEndCtx = ctx.currentTime;
    $('speak-status').textContent = 'done';
  } catch (e) {
    if (e.name === 'AbortError') {
      take.stopped = true;
      $('speak-status').textContent = 'stopped';
    } else if (take.pcm.length) { // a stream cut after its 200: the guard or a failure (server log)
      $('speak-error').textContent =
        `The server ended the stream after ${(take.floats.length / RATE).toFixed(2)} s of audio: ${e.message}`;
      $('speak-status').textContent = '';
    } else {
      $('speak-error').textContent = e.message;
      $('speak-status').textContent = '';
    }
  } finally {
    current = null;
    $('speak').disabled = false;
    $('speak-stop').disabled = true;
  }
  if (take.pcm.length) addTake(take);
}

// The SSE stream: audio blocks played as they come, progress shown, an error event thrown.
async function readEvents(reader, take) {
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let end;
    while ((end = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, end);
      buf = buf.slice(end + 2);
      const data = ev.split('\n').find((l) => l.startsWith('data: '));
      if (!data) continue;
      const e = JSON.parse(data.slice(6));
      if (e.type === 'speech.audio.delta') {
        const bin = atob(e.audio), bytes = new Uint8Array(bin.length);
        for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
        play(take, bytes);
      } else if (e.type === 'speech.progress') {
        progress(take, e.done, e.total);
      } else if (e.type === 'speech.audio.warning') { // e.g. a markup tag the model cannot honour
        take.warning = e.message;
        $('speak-warning').textContent = `Warning: ${e.message}`;
      } else if (e.type === 'speech.audio.error') {
        throw new Error(e.error && e.error.message ? e.error.message : 'the synthesis failed');
      }
    }
  }
}

// Parts of the text done of total (the server's chunks: whole sentences packed up to 200
// characters).
function progress(take, done, total) {
  take.progress = { done, total };
  const p = $('speak-progress');
  p.max = total;
  p.value = done;
  p.hidden = false;
  p.setAttribute('aria-valuetext', `${done} of ${total} parts`);
  status(take);
}

function status(take) {
  const pr = take.progress && take.progress.total > 1
    ? `, part ${take.progress.done} of ${take.progress.total} done` : '';
  $('speak-status').textContent = take.firstMs === null ? `synthesizing${pr}…`
    : `playing (first sound ${Math.round(take.firstMs)} ms after Speak), ` +
      `${(take.floats.length / RATE).toFixed(1)} s received${pr}…`;
}

// Schedules one network chunk (any byte count: an odd byte waits for the next chunk).
function play(take, bytes) {
  if (take.odd !== null) {
    const b = new Uint8Array(bytes.length + 1);
    b[0] = take.odd;
    b.set(bytes, 1);
    bytes = b;
    take.odd = null;
  }
  if (bytes.length % 2) {
    take.odd = bytes[bytes.length - 1];
    bytes = bytes.subarray(0, bytes.length - 1);
  }
  if (!bytes.length) return;
  const pcm = new Int16Array(bytes.slice().buffer);
  take.pcm.push(pcm);
  const f = new Float32Array(pcm.length);
  for (let i = 0; i < pcm.length; i++) f[i] = pcm[i] / 32768;
  growFloats(take, f);
  const buf = ctx.createBuffer(1, f.length, RATE);
  buf.copyToChannel(f, 0);
  const src = ctx.createBufferSource();
  src.buffer = buf;
  src.connect(ctx.destination);
  if (take.t0 === null) { // 50 ms of slack so the first chunks join without a gap
    take.t0 = ctx.currentTime + 0.05;
    take.tEnd = take.t0;
    take.firstMs = performance.now() + 50 - take.clickMs;
  }
  status(take);
  const at = Math.max(take.tEnd, ctx.currentTime + 0.02);
  src.start(at);
  take.tEnd = at + buf.duration;
  take.sources.push(src);
}

function stop() {
  if (!current) return;
  current.abort.abort();
  current.sources.forEach((s) => { try { s.stop(); } catch (_) { /* not started */ } });
}

function addTake(take) {
  const li = document.createElement('li');
  const secs = take.floats.length / RATE;
  // What a test reads: first sound after Speak (page clock) and whether playback was under way
  // before the stream ended (the audio clock had passed the first chunk's start).
  li.dataset.firstSoundMs = Math.round(take.firstMs);
  li.dataset.playedBeforeEnd = take.streamEndCtx !== undefined && take.streamEndCtx > take.t0 ? '1' : '0';
  li.dataset.stopped = take.stopped ? '1' : '0';
  if (take.progress) li.dataset.progress = `${take.progress.done}/${take.progress.total}`;
  if (take.warning) li.dataset.warning = take.warning;
  const label = document.createElement('span');
  label.textContent = `Take ${take.n}: ${secs.toFixed(2)} s, voice ${take.voiceLabel}` +
    `${take.stopped ? ' (stopped)' : ''}, first sound after ${Math.round(take.firstMs)} ms `;
  const audio = document.createElement('audio');
  audio.controls = true;
  const wav = wavBlob(take.pcm, RATE);
  audio.src = URL.createObjectURL(wav);
  audio.setAttribute('aria-label', `Take ${take.n}`);
  const dl = document.createElement('button');
  dl.type = 'button';
  dl.textContent = 'Download';
  dl.addEventListener('click', async () => {
    if (take.format === 'wav' || take.stopped) return saveBlob(wav, `take-${take.n}.wav`);
    // Other formats: the same request (same seed) as a whole file from the server.
    dl.disabled = true;
    try {
      const body = { ...take.body, response_format: take.format };
      delete body.stream_format;
      const r = await api('/v1/audio/speech', { method: 'POST', headers: { 'Content-Type': 'application/json' },
                                                body: JSON.stringify(body) });
      if (!r.ok) throw new Error(await errorText(r));
      saveBlob(await r.blob(), `take-${take.n}.${take.format === 'opus' ? 'ogg' : take.format}`);
    } catch (e) {
      $('speak-error').textContent = e.message;
    } finally {
      dl.disabled = false;
    }
  });
  li.append(label, audio, ' ', dl);
  $('takes').prepend(li);
}

export function speakWith(voiceId) {
  fillVoices();
  $('speak-voice').value = voiceId;
  fillStyles();
  $('speak').click();
}

export function initSpeak() {
  instructionRule();
  fillLanguages();
  onVoices(fillVoices);
  onVoices(fillStyles);
  $('speak-voice').addEventListener('change', fillStyles);
  $('speak-style').addEventListener('change', () => {
    $('speak-style-strength').disabled = !$('speak-style').value;
  });
  $('speak-form').addEventListener('submit', (e) => {
    e.preventDefault();
    if (!current) speak();
  });
  $('speak-stop').addEventListener('click', stop);
}
