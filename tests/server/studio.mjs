// studio.mjs — the studio page (GET /) in Debian's headless chromium, driven by puppeteer-core
// (run by tests/unit/test_studio.c). Controls are found by their accessible names, as a screen
// reader would. The fake microphone plays MIC_WAV. Record, clone with consent (the suggested ICL
// window shown and filled in), the voice in the library (filter, fits the model, download), hear
// the reference of a voice with ICL codes, compare two voices, the XSS-named voice as text and
// deleted, speak with the clone (playback before the stream ended), the style controls (palette
// style, strength, strict markup sent), progress through a text of three parts, Stop a long take
// (the server's cancel counter), no console error.
// The library must hold icl-ref (ICL codes, a palette style "sad") and plain-ref (another voice).
// usage: node studio.mjs BASE_URL MIC_WAV XSS_VOICE OUT_DIR SHOT_DIR
//   XSS_VOICE: a .qvoice that fits the served model, uploaded here under the name
//   <img src=x onerror=alert(1)>; OUT_DIR gets the downloads, SHOT_DIR the screenshots studio-*.png.
// usage: node studio.mjs BASE_URL --key KEY
//   a server with --api-key-file: the page asks for the key once (after a 401), loads the voices
//   with it, and after a reload of the tab uses the kept key without asking again.
// usage: node studio.mjs BASE_URL --first-sound N
//   only measures: N takes with the model's first preset speaker (one sentence), each the time
//   from the Speak click to the first scheduled sound on the page's own clock (performance.now).
// Prints one JSON line of figures; exit 0 when every check passed, 1 otherwise (one line on stderr).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import puppeteer from 'puppeteer-core';

const [base, micWav, xssVoice, outDir, shotDir] = process.argv.slice(2);
const XSS = '<img src=x onerror=alert(1)>';
const NAME = 'studio-take';
const figures = {};
let browser;

function fail(msg) {
  console.error('studio: ' + msg);
  if (browser) browser.close().catch(() => {});
  process.exit(1);
}
const check = (ok, msg) => { if (!ok) fail(msg); };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function metric(name) {
  const t = await (await fetch(base + '/metrics')).text();
  const m = t.match(new RegExp('^' + name + ' (\\S+)$', 'm'));
  return m ? Number(m[1]) : -1;
}

async function waitFile(dir, suffix, ms) {
  for (let t = 0; t < ms; t += 100) {
    const f = fs.readdirSync(dir).find((n) => n.endsWith(suffix));
    if (f) return path.join(dir, f);
    await sleep(100);
  }
  return null;
}

async function launch(extra) {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'qvoice-studio-'));
  browser = await puppeteer.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    userDataDir: profile,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
           '--disable-background-networking', '--disable-component-update', '--disable-sync',
           '--autoplay-policy=no-user-gesture-required', ...extra],
  });
  const page = await browser.newPage();
  await page.setViewport({ width: 1100, height: 900 });
  return page;
}

async function firstSound(n) {
  const page = await launch([]);
  await page.goto(base + '/', { waitUntil: 'load' });
  await page.waitForSelector('body[data-ready="1"]', { timeout: 15000 });
  await page.$eval('#speak-text', (e) => { e.value = 'Hello, this is the first sentence of the take.'; });
  await page.$eval('#speak-max-seconds', (e) => { e.value = '4'; });
  const ms = [];
  for (let i = 1; i <= n; i++) {
    await (await page.waitForSelector('aria/Speak[role="button"]')).click();
    await page.waitForFunction((k) => document.querySelectorAll('#takes li').length >= k, { timeout: 300000 }, i);
    ms.push(Number(await page.$eval('#takes li', (li) => li.dataset.firstSoundMs)));
  }
  await browser.close();
  ms.sort((a, b) => a - b);
  console.log(JSON.stringify({ first_sound_ms: ms, median: ms[Math.floor(ms.length / 2)] }));
}

async function withKey(key) {
  const page = await launch([]);
  const errors = [];
  page.on('console', (m) => { // the one 401 that makes the page ask is expected
    if (m.type() === 'error' && !/status of 401/.test(m.text())) errors.push(m.text());
  });
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(base + '/', { waitUntil: 'load' });
  const field = await page.waitForSelector('aria/API key', { visible: true, timeout: 15000 });
  await field.type(key);
  await (await page.waitForSelector('aria/Use key[role="button"]')).click();
  await page.waitForSelector('body[data-ready="1"]', { timeout: 15000 });
  const voices = await page.$$eval('#speak-voice option', (o) => o.length);
  check(voices > 0, 'no voice listed after the key was given');
  await page.reload({ waitUntil: 'load' });
  await page.waitForSelector('body[data-ready="1"]', { timeout: 15000 });
  check(await page.$eval('#key-form', (f) => f.hidden), 'the key was asked again after a reload');
  check(errors.length === 0, `browser console errors: ${JSON.stringify(errors)}`);
  await browser.close();
  console.log(JSON.stringify({ key: 'asked once' }));
}

async function main() {
  // The XSS-named voice, uploaded by a plain client.
  const fd = new FormData();
  fd.append('audio_sample', new Blob([fs.readFileSync(xssVoice)]), 'xss.qvoice');
  fd.append('name', XSS);
  fd.append('consent', 'test voice');
  const up = await fetch(base + '/v1/audio/voices', { method: 'POST', body: fd });
  check(up.ok, `uploading the XSS-named voice: HTTP ${up.status} ${await up.text()}`);

  const page = await launch(['--use-fake-ui-for-media-stream', '--use-fake-device-for-media-stream',
                             `--use-file-for-fake-audio-capture=${micWav}`]);
  const errors = [];
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('dialog', async (d) => { errors.push('dialog opened: ' + d.message()); await d.dismiss(); });
  const cdp = await page.createCDPSession();
  await cdp.send('Browser.setDownloadBehavior', { behavior: 'allow', downloadPath: outDir });

  const res = await page.goto(base + '/', { waitUntil: 'load' });
  check(res.status() === 200, `GET /: HTTP ${res.status()}`);
  const csp = res.headers()['content-security-policy'] || '';
  check(/default-src 'self'/.test(csp) && !/unsafe-inline/.test(csp), `CSP: '${csp}'`);
  await page.waitForSelector('body[data-ready="1"]', { timeout: 15000 });
  const byName = (name, role) => page.waitForSelector(`aria/${name}${role ? `[role="${role}"]` : ''}`, { timeout: 10000 });

  // Every control the issue names is there by its accessible name.
  for (const [n, r] of [['Text', 'textbox'], ['Voice', 'combobox'], ['Instruction', 'textbox'],
                        ['Style', 'combobox'], ['Style strength', 'spinbutton'], ['Strict markup', 'checkbox'],
                        ['Markup help', null], ['Speak', 'button'], ['Stop', 'button']])
    await byName(n, r).catch(() => fail(`no control named ${n} (${r})`));
  const instrDisabled = await (await byName('Instruction', 'textbox')).evaluate((e) => e.disabled);
  check(instrDisabled, 'Instruction is enabled on a 0.6B CustomVoice model');

  // ---- Clone: record from the fake microphone, consent, clone.
  await (await byName('Clone', 'tab')).click();
  for (const [n, r] of [['Reference audio', null], ['Record', 'button'], ['Transcript', 'textbox'],
                        ['ICL window', 'textbox'], ['Consent', 'textbox'], ['Clone', 'button']])
    await byName(n, r).catch(() => fail(`no control named ${n}`));
  // Reference audio opens the file picker; a picked file becomes the clip (then a recording
  // replaces it).
  const [chooser] = await Promise.all([page.waitForFileChooser({ timeout: 10000 }),
                                       (await byName('Reference audio', 'button')).click()]);
  await chooser.accept([micWav]);
  await page.waitForFunction(() => document.getElementById('clone-source').textContent.startsWith('File: '),
                             { timeout: 10000 });
  await (await byName('Record', 'button')).click();
  await sleep(6000);
  const level = await page.$eval('#clone-level', (m) => m.value);
  await page.screenshot({ path: path.join(shotDir, 'studio-record.png') }); // meter and timer live
  await (await byName('Stop recording', 'button')).click();
  await page.waitForFunction(() => document.getElementById('clone-source').textContent.startsWith('Recorded'),
                             { timeout: 10000 });
  const secs = parseFloat(await page.$eval('#clone-timer', (e) => e.textContent));
  check(secs >= 3, `recorded ${secs} s in 6 s of wall time`);
  figures.recorded_seconds = secs;
  figures.mic_level_while_recording = level;
  await (await byName('Name', 'textbox')).type(NAME);
  await (await byName('Consent', 'textbox')).type('I am the speaker and I agree to this clone.');
  const cloneT0 = Date.now();
  await (await byName('Clone', 'button')).click();
  await page.waitForFunction(() => !document.getElementById('clone-result').hidden ||
                                   document.getElementById('clone-error').textContent, { timeout: 120000 });
  const cloneErr = await page.$eval('#clone-error', (e) => e.textContent);
  check(!cloneErr, `clone failed: ${cloneErr}`);
  figures.clone_ms = Date.now() - cloneT0;
  const report = await page.$eval('#clone-report', (e) => e.textContent);
  check(report.includes(NAME), 'the report does not name the new voice');
  // cloned without a transcript: the server's suggested ICL window, in the report and the field
  check(report.includes('Suggested ICL window'), 'no suggested ICL window in the report');
  const win = await page.$eval('#clone-icl-window', (e) => e.value);
  check(/^\d+\.\d+-\d+\.\d+$/.test(win), `the ICL window field was not filled in: '${win}'`);
  figures.suggested_icl_window = win;
  await page.screenshot({ path: path.join(shotDir, 'studio-clone.png'), fullPage: true });

  // ---- Library: the new voice and the XSS name as text.
  await (await byName('Library', 'tab')).click();
  await page.waitForFunction((n) => [...document.querySelectorAll('#library td.name')].some((td) => td.textContent === n),
                             { timeout: 10000 }, NAME);
  const names = await page.$$eval('#library td.name', (tds) => tds.map((t) => t.textContent));
  check(names.includes(XSS), `the XSS-named voice is not shown as text (${JSON.stringify(names)})`);
  check((await page.$$('#library img')).length === 0, 'an <img> was created from a voice name');
  await (await byName('Filter', 'searchbox')).type('studio');
  const filtered = await page.$$eval('#library td.name', (tds) => tds.map((t) => t.textContent));
  check(filtered.length === 1 && filtered[0] === NAME, `filter: ${JSON.stringify(filtered)}`);
  const row = await page.$(`#library tr[data-id]`);
  await (await row.waitForSelector('aria/Download[role="button"]')).click();
  const qv = await waitFile(outDir, '.qvoice', 10000);
  check(qv, 'the .qvoice download did not arrive');
  figures.downloaded_voice = qv;
  // the server's fit check: the clone fits the served model; no ICL, so no reference to hear
  await page.waitForFunction(() => document.querySelector('#library tr[data-id] td.fit').dataset.fit, { timeout: 20000 });
  const fit = await page.$eval('#library tr[data-id] td.fit', (td) => td.textContent);
  check(fit === 'yes', `Fits model of the clone: '${fit}'`);
  // the server signed its clone with its own key; the XSS voice was uploaded unsigned
  const signed = await page.$eval('#library tr[data-id] td.signed', (td) => [td.textContent, td.dataset.signature]);
  check(signed[0] === 'studio test (trusted)' && signed[1] === 'trusted', `Signed cell of the clone: ${JSON.stringify(signed)}`);
  check(await (await row.waitForSelector('aria/Hear reference[role="button"]')).evaluate((b) => b.disabled),
        'Hear reference is enabled for a voice without ICL codes');
  // hear the reference of the voice with ICL codes: the decoded codes play
  await page.$eval('#library-filter', (e) => { e.value = 'icl-ref'; e.dispatchEvent(new Event('input')); });
  const iclRow = await page.waitForSelector('#library tr[data-id]');
  await (await iclRow.waitForSelector('aria/Hear reference[role="button"]')).click();
  await page.waitForFunction(() => { const a = document.getElementById('library-player');
    return !a.hidden && a.duration > 1; }, { timeout: 60000 });
  figures.reference_seconds = await page.$eval('#library-player', (a) => a.duration);
  // compare two voices
  const pick = (id, name) => page.$eval(`#${id}`, (sel, n) => {
    sel.value = [...sel.options].find((o) => o.textContent === n).value;
  }, name);
  await pick('compare-a', 'icl-ref');
  await pick('compare-b', 'plain-ref');
  await (await byName('Compare voices', 'button')).click();
  await page.waitForFunction(() => document.getElementById('compare-result').dataset.cosine ||
                                   document.getElementById('compare-result').className === 'error', { timeout: 20000 });
  const cosine = Number(await page.$eval('#compare-result', (e) => e.dataset.cosine));
  check(cosine > -1 && cosine <= 1, `compare: ${await page.$eval('#compare-result', (e) => e.textContent)}`);
  figures.compare_cosine = cosine;
  await page.$eval('#library-filter', (e) => { e.value = ''; e.dispatchEvent(new Event('input')); });
  await page.screenshot({ path: path.join(shotDir, 'studio-library.png'), fullPage: true });
  // Delete (asked twice) the XSS-named voice.
  const xssRow = async () => (await page.evaluateHandle((n) => [...document.querySelectorAll('#library tbody tr')]
    .find((tr) => tr.querySelector('td.name').textContent === n) || null, XSS)).asElement();
  await (await (await xssRow()).waitForSelector('aria/Delete[role="button"]')).click();
  await (await (await xssRow()).waitForSelector('aria/Confirm delete[role="button"]')).click();
  await page.waitForFunction((n) => ![...document.querySelectorAll('#library td.name')].some((td) => td.textContent === n),
                             { timeout: 10000 }, XSS);
  const listed = await (await fetch(base + '/v1/audio/voices')).json();
  check(!listed.data.some((v) => v.name === XSS), 'the deleted voice is still in the library');

  // ---- Speak with the clone (from the library row): streaming playback.
  await (await byName('Speak', 'tab')).click();
  await page.$eval('#speak-max-seconds', (e) => { e.value = '20'; });
  await page.$eval('#library-filter', (e) => { e.value = 'studio'; e.dispatchEvent(new Event('input')); });
  const voiceSel = await byName('Voice', 'combobox');
  const id = await page.$eval('#library tr[data-id]', (tr) => tr.dataset.id);
  await voiceSel.select(id);
  await byName('Text', 'textbox');
  // Sentences: the text is synthesized a sentence at a time, and the tiny random-weight model's
  // runaway guard cuts a single chunk that runs past its length bound.
  const sentences = (n) => Array.from({ length: n }, (_, i) => `This is sentence ${i + 1} of the studio test.`).join(' ');
  await page.$eval('#speak-text', (e, v) => { e.value = v; }, sentences(8));
  await (await byName('Speak', 'button')).click();
  await page.waitForSelector('#takes li', { timeout: 120000 });
  const take = await page.$eval('#takes li', (li) => ({ ...li.dataset, text: li.textContent }));
  const speakErr = await page.$eval('#speak-error', (e) => e.textContent);
  check(!speakErr, `speak failed: ${speakErr}`);
  check(take.playedBeforeEnd === '1', `playback had not started before the stream ended (${JSON.stringify(take)})`);
  figures.first_sound_ms = Number(take.firstSoundMs);
  await (await (await page.$('#takes li')).waitForSelector('aria/Download[role="button"]')).click();
  check(await waitFile(outDir, '.wav', 10000), 'the take download did not arrive');

  // ---- Style controls and progress: icl-ref's palette style, its strength, strict markup go in
  // the request; a text of three parts shows part k of 3 (12 frames a part, added to the request
  // here: the random model would not end a part by itself).
  await page.$eval('#library-filter', (e) => { e.value = 'icl-ref'; e.dispatchEvent(new Event('input')); });
  await voiceSel.select(await page.$eval('#library tr[data-id]', (tr) => tr.dataset.id));
  const styles = await page.$$eval('#speak-style option', (o) => o.map((x) => x.value));
  check(styles.includes('sad'), `Style offers ${JSON.stringify(styles)}, not the palette's sad`);
  await (await byName('Style', 'combobox')).select('sad');
  await (await byName('Style strength', 'spinbutton')).type('0.3');
  await (await byName('Strict markup', 'checkbox')).click();
  let sent = null;
  await page.setRequestInterception(true);
  const onRequest = (rq) => {
    if (!rq.url().endsWith('/v1/audio/speech')) return rq.continue();
    sent = JSON.parse(rq.postData());
    rq.continue({ postData: JSON.stringify({ ...sent, max_new_tokens: 12 }) });
  };
  page.on('request', onRequest);
  const clip12 = 'One dollar and eighty-seven cents. That was all. And sixty cents of it was in pennies, saved one and two at a time by bulldozing the grocer.';
  await page.$eval('#speak-text', (e, v) => { e.value = v; }, [clip12, clip12, clip12].join(' '));
  const nTakes = await page.$$eval('#takes li', (l) => l.length);
  await (await byName('Speak', 'button')).click();
  await page.waitForFunction((k) => document.querySelectorAll('#takes li').length > k, { timeout: 120000 }, nTakes);
  page.off('request', onRequest);
  await page.setRequestInterception(false);
  check(sent && sent.style === 'sad' && sent.style_strength === 0.3 && sent.strict_markup === true,
        `the style controls were not sent: ${JSON.stringify(sent)}`);
  const styled = await page.$eval('#takes li', (li) => ({ ...li.dataset }));
  const styledErr = await page.$eval('#speak-error', (e) => e.textContent);
  check(!styledErr, `styled take failed: ${styledErr}`);
  check(styled.progress === '3/3', `progress of a three-part text: ${JSON.stringify(styled)}`);
  await page.screenshot({ path: path.join(shotDir, 'studio-speak.png'), fullPage: true });
  await page.$eval('#speak-style', (e) => { e.value = ''; e.dispatchEvent(new Event('change')); });
  await page.$eval('#speak-strict', (e) => { e.checked = false; });

  // ---- Stop a long take: the server counts a cancelled synthesis.
  const cancelled0 = await metric('qvoice_cancelled_total');
  await page.$eval('#speak-max-seconds', (e) => { e.value = '110'; });
  await page.$eval('#speak-text', (e, v) => { e.value = v; }, sentences(40));
  await (await byName('Speak', 'button')).click();
  await page.waitForFunction(() => document.getElementById('speak-status').textContent.startsWith('playing'),
                             { timeout: 60000 });
  await (await byName('Stop', 'button')).click();
  await page.waitForFunction(() => document.getElementById('speak-status').textContent === 'stopped', { timeout: 10000 });
  let cancelled = cancelled0;
  for (let t = 0; t < 50 && cancelled <= cancelled0; t++) {
    await sleep(100);
    cancelled = await metric('qvoice_cancelled_total');
  }
  check(cancelled === cancelled0 + 1, `qvoice_cancelled_total ${cancelled0} -> ${cancelled} after Stop`);
  const stoppedTake = await page.$eval('#takes li', (li) => li.dataset.stopped);
  check(stoppedTake === '1', 'the stopped take is not in the list');

  await sleep(300); // late console messages
  check(errors.length === 0, `browser console errors: ${JSON.stringify(errors)}`);
  await browser.close();
  console.log(JSON.stringify(figures));
}

(micWav === '--first-sound' ? firstSound(Number(xssVoice)) : micWav === '--key' ? withKey(xssVoice) : main()).catch((e) => fail(e.stack || String(e)));
