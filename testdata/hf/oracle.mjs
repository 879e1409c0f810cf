// The Hugging Face Hub's own JavaScript client (@huggingface/hub) pointed
// at a Hub by its hubUrl option: lists a repository's top level at a
// revision, downloads every file and slices each one, and prints what it
// got as JSON on stdout: for each file its listing entry, the sha256 and
// size of its bytes, and the sha256 of bytes [start, end) of it.
//
// usage: node oracle.mjs HUB_URL REPO REVISION START END
//   (REPO is ORG/NAME, or datasets/ORG/NAME)
import { createRequire } from "node:module";
import { createHash } from "node:crypto";
import path from "node:path";
import { fileURLToPath } from "node:url";

const require = createRequire(path.join(path.dirname(fileURLToPath(import.meta.url)), "js", "package.json"));
const hub = require("@huggingface/hub");

const [hubUrl, name, revision, startArg, endArg] = process.argv.slice(2);
const repo = name.startsWith("datasets/") ? { type: "dataset", name: name.slice("datasets/".length) } : { type: "model", name };
const start = Number(startArg), end = Number(endArg);
const sha256 = (buf) => createHash("sha256").update(Buffer.from(buf)).digest("hex");

const out = { files: [] };
for await (const entry of hub.listFiles({ repo, revision, hubUrl })) {
  const f = { type: entry.type, path: entry.path, size: entry.size, oid: entry.oid, lfs: entry.lfs ?? null };
  if (entry.type === "file") {
    const blob = await hub.downloadFile({ repo, path: entry.path, revision, hubUrl, xet: false });
    const all = await blob.arrayBuffer();
    f.download = { size: all.byteLength, sha256: sha256(all) };
    const s = Math.min(start, blob.size), e = Math.min(end, blob.size);
    // An empty slice is no request: a Range of no byte is not one.
    f.slice = { start: s, end: e, sha256: sha256(e > s ? await blob.slice(s, e).arrayBuffer() : new Uint8Array()) };
  }
  out.files.push(f);
}
process.stdout.write(JSON.stringify(out));
