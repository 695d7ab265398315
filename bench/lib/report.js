'use strict';
// What the standalone benchmark scripts (limits.js, locks.js, instructions.js, scripts.js, client.js) share: a private copy of dist/, a build's script layer, a `--name value` option, the report's footer and --save, and the exit on a crash.
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

/**
 * A private copy of dist/ (or of the build in `source`) inside bench/, so a rebuild in the same tree
 * while a benchmark runs cannot pull it from under it, and its requires find node_modules.
 */
function privateDist(npmScript, source = null) {
  const dist = source === null ? path.join(__dirname, '..', '..', 'dist') : path.resolve(source);
  if (!fs.existsSync(path.join(dist, 'index.js')))
    throw new Error(`No dist/: run \`npm run build\` first (\`npm run ${npmScript}\` does)`);
  const copy = path.join(__dirname, '..', `.dist-${process.pid}`);
  fs.cpSync(dist, copy, { recursive: true });
  process.on('exit', () => fs.rmSync(copy, { recursive: true, force: true }));
  return copy;
}

/** The value after `--name` on the command line, or `fallback`. */
function option(name, fallback) {
  const at = process.argv.indexOf(`--${name}`);
  return at >= 0 && process.argv[at + 1] !== undefined ? process.argv[at + 1] : fallback;
}

/** Prints the footer (failed checks, run time, load) and with --save writes `bench/results/<date>-<name>.md`. */
function finish({ name, date, header, result, startedAt, loadAtStart, args, log }) {
  const seconds = ((Date.now() - startedAt) / 1000).toFixed(0);
  const footer = [
    result.failures.length ? `## Failed checks\n\n${result.failures.map((x) => `- ${x}`).join('\n')}\n` : '',
    `Run time: ${seconds} s. Load average (1 min) at start ${loadAtStart.toFixed(2)}, at end ${os.loadavg()[0].toFixed(2)}: other work on the machine adds noise.`,
    '',
  ].join('\n');
  process.stdout.write(footer);
  if (args.save) {
    const outDir = args.out ?? path.join(__dirname, '..', 'results');
    fs.mkdirSync(outDir, { recursive: true });
    const file = path.join(outDir, `${date}-${name}.md`);
    fs.writeFileSync(file, [header, result.markdown, footer].join('\n'));
    log(`wrote ${file}`);
  }
  process.exitCode = result.failures.length ? 1 : 0;
}

/** Runs `main`; on a crash prints it, kills the benchmark's redis-server (`started.redis`) and exits 1. */
function runMain(main, started) {
  main().catch((error) => {
    process.stderr.write(`${error.stack ?? error}\n`);
    started.redis?.killNow();
    process.exit(1);
  });
}

/**
 * The script layer of the build in `dist`: the registry, builders and sender of dist/redis/, or
 * dist/redis/scripts.js in builds before they were split. `null` when `dist` has neither.
 */
function scriptLayer(dist) {
  const redis = path.join(dist, 'redis');
  if (fs.existsSync(path.join(redis, 'send.js'))) {
    return {
      ...require(path.join(redis, 'registry.js')),
      ...require(path.join(redis, 'commands.js')),
      ...require(path.join(redis, 'send.js')),
      scriptLoadCommand: (script) => ['SCRIPT', 'LOAD', script.source],
    };
  }
  return fs.existsSync(path.join(redis, 'scripts.js')) ? require(path.join(redis, 'scripts.js')) : null;
}

module.exports = { privateDist, scriptLayer, option, finish, runMain };
