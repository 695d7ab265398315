'use strict';
/* Where a benchmark's figures come from: the commit, and the local date results files are named by. */
const { execFileSync } = require('node:child_process');
const path = require('node:path');

const benchDir = path.join(__dirname, '..');

/** The short commit of HEAD, marked when lib/ has uncommitted changes. */
function gitCommit() {
  try {
    const commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: benchDir, encoding: 'utf8' }).trim();
    const dirty = execFileSync('git', ['status', '--porcelain', '--', '../lib'], {
      cwd: benchDir,
      encoding: 'utf8',
    }).trim();
    return dirty ? `${commit} + uncommitted lib/ changes` : commit;
  } catch {
    return 'unknown';
  }
}

/** Today as YYYY-MM-DD, in local time. */
function localDate() {
  const d = new Date();
  const pad = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`;
}

/** A results file's name without its extension: `<date>-<commit>-<kind>` (the commit of HEAD, `-dirty` with lib/ changes). */
function resultsName(kind, commit = gitCommit()) {
  return `${localDate()}-${commit.replace(' + uncommitted lib/ changes', '-dirty')}-${kind}`;
}

module.exports = { gitCommit, localDate, resultsName };
