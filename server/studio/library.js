// library.js — the Library page: every voice of the server's library (name, language, created,
// consent, signer, size, ICL, whether it fits the served model), a text filter, hear its reference (the
// ICL codes decoded by the server: what the file holds), download of the .qvoice, upload of one,
// delete (asked twice), "Speak" with a voice, and the similarity of two voices.
import { $, api, apiJson, errorText, saveBlob, state, onVoices, refreshVoices, showPage } from './common.js';
import { speakWith } from './speak.js';

function button(text, onClick) {
  const b = document.createElement('button');
  b.type = 'button';
  b.textContent = text;
  b.addEventListener('click', onClick);
  return b;
}

const fits = new Map(); // voice id -> the server's fit check (GET .../fit), asked once per id
let fitQueue = Promise.resolve(); // one check at a time: each opens the voice file on the server

// The "Fits model" cell: a voice the server found fitting says so in the list ("fits"); otherwise
// filled when the server's check answers, with the reason on hover and for screen readers.
async function fitCell(td, v) {
  if (v.fits === true && !fits.has(v.id)) {
    td.textContent = 'yes';
    td.dataset.fit = 'fits';
    return;
  }
  if (!fits.has(v.id)) {
    fitQueue = fitQueue.then(() => apiJson(`/v1/audio/voices/${encodeURIComponent(v.id)}/fit`))
      .catch((e) => ({ error: e.message }));
    fits.set(v.id, fitQueue);
  }
  td.textContent = 'checking…';
  const f = await fits.get(v.id);
  const m = f.models && f.models[0];
  td.textContent = f.error ? 'unknown' : !m ? '—' : m.fit === 'fits' ? 'yes' : m.fit === 'foreign' ? 'foreign' : 'no';
  td.dataset.fit = f.error ? 'error' : m ? m.fit : '';
  const why = f.error || (m && m.detail) || '';
  td.title = why;
  if (why) td.setAttribute('aria-description', why);
}

let player = null; // the reference being loaded or played: { id, url }

async function hearReference(v, label) {
  const status = $('library-playing'), audio = $('library-player');
  $('library-error').textContent = '';
  status.textContent = `Decoding the reference of ${label}…`;
  try {
    const r = await api(`/v1/audio/voices/${encodeURIComponent(v.id)}/reference?response_format=wav`);
    if (!r.ok) throw new Error(await errorText(r));
    const blob = await r.blob();
    if (player) URL.revokeObjectURL(player.url);
    player = { id: v.id, url: URL.createObjectURL(blob) };
    audio.src = player.url;
    audio.hidden = false;
    audio.dataset.voice = v.id;
    status.textContent = `Reference of ${label}: what the file holds (its ICL codes decoded).`;
    await audio.play().catch(() => { /* autoplay refused: the controls are there */ });
  } catch (e) {
    status.textContent = '';
    $('library-error').textContent = `${label}: ${e.message}`;
  }
}

function fillCompare() {
  for (const id of ['compare-a', 'compare-b']) {
    const sel = $(id), keep = sel.value;
    sel.replaceChildren(...state.voices.map((v) => {
      const o = document.createElement('option');
      o.value = v.id;
      o.textContent = v.name || v.id.slice(0, 12);
      return o;
    }));
    if ([...sel.options].some((o) => o.value === keep)) sel.value = keep;
  }
  if (!$('compare-b').value || $('compare-b').value === $('compare-a').value)
    $('compare-b').selectedIndex = Math.min(1, state.voices.length - 1);
  $('compare').disabled = state.voices.length < 2;
}

async function compare(e) {
  e.preventDefault();
  const out = $('compare-result'), a = $('compare-a'), b = $('compare-b');
  out.className = '';
  out.textContent = 'comparing…';
  try {
    const j = await apiJson(`/v1/audio/voices/${encodeURIComponent(a.value)}/similarity?to=${encodeURIComponent(b.value)}`);
    out.dataset.cosine = j.cosine;
    out.textContent = `${a.selectedOptions[0].textContent} and ${b.selectedOptions[0].textContent}: ` +
      `speaker similarity ${j.cosine.toFixed(3)} (x-vector cosine; the same speaker is usually above 0.7)`;
  } catch (err) {
    out.className = 'error';
    out.textContent = err.message;
  }
}

// The "Signed" cell: who signed the file and whether this server trusts that key (one of its
// --trusted keys or its own); a signature that does not verify says so.
function signedCell(td, s) {
  if (!s) { td.textContent = 'no'; return; }
  const who = s.signer || `key ${s.key_id}`;
  td.textContent = !s.valid ? 'invalid signature' : s.trusted ? `${who} (trusted)` : `${who} (not a trusted key)`;
  td.dataset.signature = !s.valid ? 'invalid' : s.trusted ? 'trusted' : 'untrusted';
  td.title = `key ${s.key_id}, signed ${new Date(s.signed_at * 1000).toISOString().slice(0, 16).replace('T', ' ')} UTC`;
}

function kib(n) { return n >= 1048576 ? `${(n / 1048576).toFixed(1)} MiB` : `${Math.ceil(n / 1024)} KiB`; }

function render() {
  const q = $('library-filter').value.trim().toLowerCase();
  const body = $('library').tBodies[0];
  body.replaceChildren();
  for (const v of state.voices) {
    if (q && ![v.name, v.language, v.id].some((s) => (s || '').toLowerCase().includes(q))) continue;
    const tr = document.createElement('tr');
    tr.dataset.id = v.id;
    const cell = (text, cls) => {
      const td = document.createElement('td');
      td.textContent = text;
      if (cls) td.className = cls;
      tr.append(td);
      return td;
    };
    cell(v.name || '(no name)', 'name').title = v.id;
    cell(v.language || '—');
    cell(v.created_at ? new Date(v.created_at * 1000).toISOString().slice(0, 16).replace('T', ' ') : '—');
    cell(v.consent ? 'yes' : 'no');
    signedCell(cell('', 'signed'), v.signature);
    cell(kib(v.bytes || 0));
    cell(v.has_icl ? `${(v.icl_seconds || 0).toFixed(1)} s` : 'no');
    fitCell(cell('', 'fit'), v);
    const actions = cell('');
    const label = v.name || v.id;
    const hear = button('Hear reference', () => hearReference(v, label));
    hear.setAttribute('aria-description', label);
    hear.disabled = !v.has_icl;
    if (!v.has_icl) hear.title = 'cloned without a transcript: the file holds no reference codes';
    const speak = button('Speak', () => { showPage('speak'); speakWith(v.id); });
    speak.setAttribute('aria-description', `with ${label}`);
    const dl = button('Download', async () => {
      try {
        const r = await api(`/v1/audio/voices/${encodeURIComponent(v.id)}?download=1`);
        if (!r.ok) throw new Error(await errorText(r));
        saveBlob(await r.blob(), `${(v.name || v.id).replace(/[^\w.-]+/g, '_')}.qvoice`);
      } catch (e) { $('library-error').textContent = e.message; }
    });
    dl.setAttribute('aria-description', label);
    const del = button('Delete', async () => {
      if (!del.dataset.armed) { // asked twice: no modal dialog
        del.dataset.armed = '1';
        del.textContent = 'Confirm delete';
        return;
      }
      try {
        const r = await api(`/v1/audio/voices/${encodeURIComponent(v.id)}`, { method: 'DELETE' });
        if (!r.ok) throw new Error(await errorText(r));
        await refreshVoices();
      } catch (e) { $('library-error').textContent = e.message; }
    });
    del.setAttribute('aria-description', label);
    actions.append(speak, ' ', hear, ' ', dl);
    if (v.deletable !== false) actions.append(' ', del); // a user key may not delete others' voices
    body.append(tr);
  }
  $('library-presets').textContent = state.presets.length
    ? `Preset speakers of the model: ${state.presets.join(', ')}` : '';
}

async function upload() {
  const f = $('library-upload').files[0];
  if (!f) return;
  $('library-error').textContent = '';
  const fd = new FormData();
  fd.append('audio_sample', f, f.name);
  const consent = $('library-consent').value.trim();
  if (consent) fd.append('consent', consent);
  try {
    await apiJson('/v1/audio/voices', { method: 'POST', body: fd });
    await refreshVoices();
  } catch (e) {
    $('library-error').textContent = `${f.name}: ${e.message}`;
  } finally {
    $('library-upload').value = '';
  }
}

export function initLibrary() {
  onVoices(render);
  onVoices(fillCompare);
  $('compare-form').addEventListener('submit', compare);
  $('library-filter').addEventListener('input', render);
  $('library-pick').addEventListener('click', () => $('library-upload').click());
  $('library-upload').addEventListener('change', upload);
  $('library-refresh').addEventListener('click', () =>
    refreshVoices().catch((e) => { $('library-error').textContent = e.message; }));
}
