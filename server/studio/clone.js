// clone.js — the Clone page: a reference clip from a file (picked or dropped) or from the
// microphone (an AudioWorklet collects the samples, encoded here as a 16-bit WAV, which the
// server reads; MediaRecorder's WebM is not a format libsndfile reads), then POST
// /v1/audio/voices with the consent statement, and the server's hygiene report.
import { $, api, errorText, wavBlob, refreshVoices, showPage } from './common.js';
import { speakWith } from './speak.js';

let clip = null;      // {blob, name}
let rec = null;       // recording in progress
let lastVoice = null; // id of the voice just cloned

function setClip(blob, name, how) {
  clip = { blob, name };
  const a = $('clone-preview');
  if (a.src) URL.revokeObjectURL(a.src);
  a.src = URL.createObjectURL(blob);
  a.hidden = false;
  $('clone-source').textContent = `${how}: ${name}, ${(blob.size / 1024).toFixed(0)} KiB`;
}

async function startRecording() {
  const stream = await navigator.mediaDevices.getUserMedia({
    audio: { echoCancellation: false, noiseSuppression: false, autoGainControl: false } });
  const ctx = new AudioContext();
  await ctx.audioWorklet.addModule('/studio/recorder-worklet.js');
  const src = ctx.createMediaStreamSource(stream);
  const node = new AudioWorkletNode(ctx, 'qvoice-recorder');
  const r = { stream, ctx, node, blocks: [], n: 0, peak: 0, done: false };
  rec = r;
  node.port.onmessage = (e) => { // blocks still queued after Stop are dropped
    if (r.done) return;
    const f = e.data;
    r.blocks.push(f);
    r.n += f.length;
    let p = 0;
    for (let i = 0; i < f.length; i++) p = Math.max(p, Math.abs(f[i]));
    r.peak = Math.max(p, r.peak); // the meter shows the peak of each 100 ms
  };
  src.connect(node);
  r.timer = setInterval(() => {
    $('clone-level').value = Math.min(1, r.peak);
    r.peak = 0;
    $('clone-timer').textContent = `${(r.n / ctx.sampleRate).toFixed(1)} s`;
  }, 100);
  $('clone-record').textContent = 'Stop recording';
  $('clone-record').classList.add('recording');
  $('clone-record').setAttribute('aria-pressed', 'true');
}

async function stopRecording() {
  const r = rec;
  rec = null;
  r.done = true;
  clearInterval(r.timer);
  r.stream.getTracks().forEach((t) => t.stop());
  r.node.disconnect();
  await r.ctx.close();
  const pcm = new Int16Array(r.n);
  let k = 0;
  for (const b of r.blocks)
    for (let i = 0; i < b.length; i++) pcm[k++] = Math.max(-32768, Math.min(32767, Math.round(b[i] * 32767)));
  $('clone-record').textContent = 'Record';
  $('clone-record').classList.remove('recording');
  $('clone-record').setAttribute('aria-pressed', 'false');
  $('clone-level').value = 0;
  $('clone-timer').textContent = `${(r.n / r.ctx.sampleRate).toFixed(1)} s`;
  setClip(wavBlob([pcm], r.ctx.sampleRate), 'recording.wav', 'Recorded');
}

// The report as terms and values; warnings and refusal reasons stand out.
function showReport(voice) {
  const dl = $('clone-report');
  dl.replaceChildren();
  const add = (k, v, cls) => {
    const dt = document.createElement('dt'), dd = document.createElement('dd');
    dt.textContent = k;
    dd.textContent = typeof v === 'object' ? JSON.stringify(v, null, 1) : String(v);
    if (cls) dd.className = cls;
    dl.append(dt, dd);
  };
  add('voice', `${voice.name || '(no name)'}  id ${voice.id}`);
  const rep = voice.report || {};
  for (const [k, v] of Object.entries(rep))
    add(k, v, /warn|reason|refus|clip|second/i.test(k) ? 'warn' : '');
  $('clone-result').hidden = false;
  drawLevels(rep);
}

// The clip's level over time (decoded by the browser), with the kept span when the report says it.
async function drawLevels(rep) {
  const cv = $('clone-spectrum'), g = cv.getContext('2d');
  g.fillStyle = '#10141c';
  g.fillRect(0, 0, cv.width, cv.height);
  if (!clip) return;
  let buf;
  try {
    const ac = new OfflineAudioContext(1, 1, 24000);
    buf = await ac.decodeAudioData(await clip.blob.arrayBuffer());
  } catch (_) {
    return; // a format the browser cannot decode: the text report stands alone
  }
  const d = buf.getChannelData(0), w = cv.width, h = cv.height;
  const secs = d.length / buf.sampleRate;
  const span = (a, b) => [(a / secs) * w, (b / secs) * w];
  const kept = rep.kept || rep.span || null;
  const ks = rep.kept_start_s ?? (kept && kept[0]), ke = rep.kept_end_s ?? (kept && kept[1]);
  if (typeof ks === 'number' && typeof ke === 'number') {
    const [x0, x1] = span(ks, ke);
    g.fillStyle = '#1f3a28';
    g.fillRect(x0, 0, x1 - x0, h);
  }
  g.fillStyle = '#6fb3ff';
  const step = Math.max(1, Math.floor(d.length / w));
  for (let x = 0; x < w; x++) {
    let p = 0;
    for (let i = x * step; i < Math.min(d.length, (x + 1) * step); i++) p = Math.max(p, Math.abs(d[i]));
    g.fillRect(x, h / 2 - (p * h) / 2, 1, Math.max(1, p * h));
  }
  g.fillStyle = '#ccc';
  g.font = '12px sans-serif';
  for (let s = 0; s <= secs; s += 5) g.fillText(`${s} s`, (s / secs) * w + 2, h - 4);
}

async function clone(e) {
  e.preventDefault();
  $('clone-error').textContent = '';
  if (!clip) {
    $('clone-error').textContent = 'Reference audio: pick, drop or record a clip first.';
    return;
  }
  const fd = new FormData();
  fd.append('audio_sample', clip.blob, clip.name);
  const name = $('clone-name').value.trim();
  if (name) fd.append('name', name);
  fd.append('language', $('clone-language').value);
  const tr = $('clone-transcript').value.trim();
  if (tr) fd.append('transcript', tr);
  fd.append('consent', $('clone-consent').value);
  $('clone').disabled = true;
  $('clone-status').textContent = 'cloning…';
  try {
    const r = await api('/v1/audio/voices', { method: 'POST', body: fd });
    if (!r.ok) throw new Error(await errorText(r));
    const v = await r.json();
    lastVoice = v.id;
    $('clone-status').textContent = `cloned: ${v.name || v.id}`;
    showReport(v);
    await refreshVoices();
  } catch (err) {
    $('clone-error').textContent = err.message;
    $('clone-status').textContent = '';
  } finally {
    $('clone').disabled = false;
  }
}

export function initClone() {
  $('clone-pick').addEventListener('click', () => $('clone-file').click());
  $('clone-file').addEventListener('change', () => {
    const f = $('clone-file').files[0];
    if (f) setClip(f, f.name, 'File');
  });
  const drop = $('drop');
  drop.addEventListener('dragover', (e) => { e.preventDefault(); drop.classList.add('over'); });
  drop.addEventListener('dragleave', () => drop.classList.remove('over'));
  drop.addEventListener('drop', (e) => {
    e.preventDefault();
    drop.classList.remove('over');
    const f = e.dataTransfer.files[0];
    if (f) setClip(f, f.name, 'Dropped');
  });
  $('clone-record').addEventListener('click', async () => {
    $('clone-error').textContent = '';
    try {
      if (rec) await stopRecording(); else await startRecording();
    } catch (err) {
      $('clone-error').textContent = `Record: ${err.message}`;
    }
  });
  $('clone-form').addEventListener('submit', clone);
  $('clone-hear').addEventListener('click', () => {
    if (!lastVoice) return;
    showPage('speak');
    speakWith(lastVoice);
  });
}
