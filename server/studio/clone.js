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

// The report: a summary of what matters, every field under "All report fields", the picture.
function showReport(voice) {
  const rep = voice.report || {}, hy = rep.hygiene || {}, lv = hy.level || {};
  const dl = $('clone-report');
  dl.replaceChildren();
  const add = (k, v, cls) => {
    if (v === undefined || v === null || v === '') return;
    const dt = document.createElement('dt'), dd = document.createElement('dd');
    dt.textContent = k;
    dd.textContent = String(v);
    if (cls) dd.className = cls;
    dl.append(dt, dd);
  };
  const f = (x, d = 1) => (typeof x === 'number' ? x.toFixed(d) : x);
  add('Voice', `${voice.name || '(no name)'} (id ${voice.id})`);
  add('Used', rep.seconds_used !== undefined ? `${f(rep.seconds_used, 2)} s of ${f(rep.source_seconds, 2)} s` : undefined);
  add('Loudness', lv.in_lufs !== undefined ? `${f(lv.in_lufs)} LUFS in, ${f(lv.out_lufs)} LUFS after ${f(lv.gain_db)} dB gain` : undefined);
  add('Clipping', rep.clipped_fraction !== undefined ? `${f(100 * rep.clipped_fraction, 4)} % of samples` : undefined,
      lv.clip_warning ? 'warn' : '');
  const sp = hy.speakers;
  if (sp) add('Second speaker', sp.flagged_s && sp.flagged_s.length ? `flagged at ${sp.flagged_s.map((s) => f(s)).join(', ')} s` : 'none found', sp.flagged_s && sp.flagged_s.length ? 'warn' : '');
  add('ICL', rep.icl_seconds ? `${f(rep.icl_seconds, 2)} s of reference codes with the transcript` : 'none (x-vector only)');
  const win = hy.icl_window;
  if (win && !rep.icl_seconds) { // the server's pick: what to transcribe for an ICL clone
    const span = `${f(win.start_s, 2)}-${f(win.end_s, 2)}`;
    add('Suggested ICL window', `${span} s (${f(win.seconds)} s, ${f(win.voiced_s)} s voiced, SNR ${f(win.snr_db)} dB): ` +
        'transcribe what is said there, then clone again with this window');
    if (!$('clone-icl-window').value) $('clone-icl-window').value = span;
    $('clone-icl-why').textContent = `Suggested: ${span} s, the cleanest span of the clip. Give the transcript of exactly that span.`;
  }
  add('Hygiene', rep.hygiene_text);
  for (const w of rep.warnings || []) add('Warning', w, 'warn');
  const all = document.createElement('details'), sum = document.createElement('summary'), pre = document.createElement('pre');
  sum.textContent = 'All report fields';
  pre.textContent = JSON.stringify(rep, null, 1);
  all.append(sum, pre);
  const dd = document.createElement('dd');
  dd.append(all);
  dl.append(document.createElement('dt'), dd);
  $('clone-result').hidden = false;
  drawReport(rep);
}

// In-place radix-2 FFT of re/im (length a power of two).
function fft(re, im) {
  const n = re.length;
  for (let i = 1, j = 0; i < n; i++) {
    let bit = n >> 1;
    for (; j & bit; bit >>= 1) j ^= bit;
    j ^= bit;
    if (i < j) { [re[i], re[j]] = [re[j], re[i]]; [im[i], im[j]] = [im[j], im[i]]; }
  }
  for (let len = 2; len <= n; len <<= 1) {
    const a = (-2 * Math.PI) / len, wr = Math.cos(a), wi = Math.sin(a);
    for (let i = 0; i < n; i += len) {
      let cr = 1, ci = 0;
      for (let k = 0; k < len / 2; k++) {
        const xr = re[i + k + len / 2] * cr - im[i + k + len / 2] * ci;
        const xi = re[i + k + len / 2] * ci + im[i + k + len / 2] * cr;
        re[i + k + len / 2] = re[i + k] - xr; im[i + k + len / 2] = im[i + k] - xi;
        re[i + k] += xr; im[i + k] += xi;
        [cr, ci] = [cr * wr - ci * wi, cr * wi + ci * wr];
      }
    }
  }
}

// The reference's log-mel spectrogram (decoded by the browser at 16 kHz, 64 bands, one 32 ms
// window per pixel column) with the kept span, the ICL window, flagged second-speaker windows
// and clipping drawn where they occur, a time axis and a legend.
async function drawReport(rep) {
  const cv = $('clone-spectrum'), g = cv.getContext('2d');
  const W = cv.width, H = cv.height, top = 18, axis = 18, ph = H - top - axis;
  g.fillStyle = '#10141c';
  g.fillRect(0, 0, W, H);
  if (!clip) return;
  let d, rate = 16000;
  try {
    const ac = new OfflineAudioContext(1, 1, rate);
    d = (await ac.decodeAudioData(await clip.blob.arrayBuffer())).getChannelData(0);
  } catch (_) {
    return; // a format the browser cannot decode: the text report stands alone
  }
  const secs = d.length / rate, N = 512, bands = 64;
  const mel = (hz) => 2595 * Math.log10(1 + hz / 700), imel = (m) => 700 * (10 ** (m / 2595) - 1);
  const edges = Array.from({ length: bands + 1 }, (_, i) => Math.round((imel((mel(rate / 2) * i) / bands) * N) / rate));
  const img = g.createImageData(W, ph), cols = [];
  let max = -Infinity;
  const re = new Float32Array(N), im = new Float32Array(N);
  for (let x = 0; x < W; x++) {
    const c = Math.floor(((x + 0.5) * d.length) / W) - N / 2;
    for (let i = 0; i < N; i++) {
      const s = d[c + i] || 0;
      re[i] = s * (0.5 - 0.5 * Math.cos((2 * Math.PI * i) / N));
      im[i] = 0;
    }
    fft(re, im);
    const col = new Float32Array(bands);
    for (let b = 0; b < bands; b++) {
      let p = 0;
      const lo = edges[b], hi = Math.max(edges[b + 1], lo + 1);
      for (let k = lo; k < hi; k++) p += re[k] * re[k] + im[k] * im[k];
      col[b] = 10 * Math.log10(p / (hi - lo) + 1e-10);
      max = Math.max(max, col[b]);
    }
    cols.push(col);
  }
  for (let x = 0; x < W; x++)
    for (let y = 0; y < ph; y++) {
      const v = Math.max(0, Math.min(1, (cols[x][Math.floor(((ph - 1 - y) * bands) / ph)] - max + 80) / 80));
      const o = 4 * (y * W + x);
      img.data[o] = 255 * Math.min(1, 1.6 * v);
      img.data[o + 1] = 255 * Math.max(0, 1.4 * v - 0.4);
      img.data[o + 2] = 255 * Math.max(0, 0.5 - Math.abs(v - 0.35)) * 1.6;
      img.data[o + 3] = 255;
    }
  g.putImageData(img, 0, top);
  const X = (s) => (s / secs) * W;
  const hy = rep.hygiene || {}, trim = hy.trim || {};
  g.font = '12px sans-serif';
  if (typeof trim.start_s === 'number' && typeof trim.end_s === 'number') { // dim what was cut
    g.fillStyle = 'rgba(0,0,0,0.6)';
    g.fillRect(0, top, X(trim.start_s), ph);
    g.fillRect(X(trim.end_s), top, W - X(trim.end_s), ph);
    g.fillStyle = '#4cd964';
    g.fillRect(X(trim.start_s), top - 4, X(trim.end_s) - X(trim.start_s), 3);
  }
  const win = hy.icl_window;
  if (win && typeof win.start_s === 'number') { // used: a solid bar; only suggested: dashed
    g.fillStyle = g.strokeStyle = '#5ac8fa';
    if (rep.icl_seconds) g.fillRect(X(win.start_s), top - 8, X(win.end_s) - X(win.start_s), 3);
    else {
      g.setLineDash([6, 4]);
      g.strokeRect(X(win.start_s) + 1, top + 1, X(win.end_s) - X(win.start_s) - 2, ph - 2);
      g.setLineDash([]);
    }
  }
  for (const s of (hy.speakers && hy.speakers.flagged_s) || []) {
    g.fillStyle = 'rgba(255,59,48,0.45)';
    g.fillRect(X(s), top, Math.max(3, X(1.5)), ph);
  }
  if (hy.level && hy.level.clip_warning) {
    g.fillStyle = '#ff3b30';
    g.fillText('clipped', W - 60, top + 14);
  }
  g.fillStyle = '#ccc'; // time axis
  const step = secs > 40 ? 10 : secs > 12 ? 5 : secs > 4 ? 1 : 0.5;
  for (let s = 0; s <= secs; s += step) {
    g.fillRect(X(s), H - axis, 1, 4);
    g.fillText(`${s} s`, X(s) + 2, H - 4);
  }
  const legend = [['#4cd964', 'kept span'], ['#5ac8fa', rep.icl_seconds ? 'ICL window' : 'suggested ICL window (dashed)'],
                  ['#ff3b30', 'second speaker']];
  let lx = 4;
  for (const [c, t] of legend) {
    g.fillStyle = c;
    g.fillRect(lx, 4, 10, 8);
    g.fillStyle = '#ccc';
    g.fillText(t, lx + 14, 12);
    lx += g.measureText(t).width + 30;
  }
  g.fillText('log-mel 0–8 kHz', W - 110, 12);
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
  const win = $('clone-icl-window').value.trim();
  if (tr && win) fd.append('icl_window', win);
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
