'use strict';
// A hand-written SVG: cycles/s and p99 wait against client count (log-log), one line per contender.
const { CONTENDERS } = require('./contenders-meta');

const esc = (s) => String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

function niceLogTicks(min, max) {
  const ticks = [];
  for (let e = Math.floor(Math.log10(min)); e <= Math.ceil(Math.log10(max)); e++) {
    for (const m of [1, 2, 5]) {
      const v = m * 10 ** e;
      if (v >= min * 0.999 && v <= max * 1.001) ticks.push(v);
    }
  }
  return ticks;
}

function label(v) {
  if (v >= 1000) return `${v / 1000}k`;
  if (v < 1) return String(Number(v.toPrecision(2)));
  return String(v);
}

function panel({ x0, y0, w, h, title, yLabel, series, metric, counts }) {
  const values = series.flatMap((s) => s.points.map((p) => p[metric])).filter((v) => v !== null && v > 0);
  if (values.length === 0) return '';
  const yMin = 10 ** Math.floor(Math.log10(Math.min(...values)));
  const yMax = 10 ** Math.ceil(Math.log10(Math.max(...values)));
  const xMin = Math.log2(counts[0]);
  const xMax = Math.log2(counts[counts.length - 1]);
  const px = (n) => x0 + (xMax === xMin ? w / 2 : ((Math.log2(n) - xMin) / (xMax - xMin)) * w);
  const py = (v) => y0 + h - ((Math.log10(v) - Math.log10(yMin)) / (Math.log10(yMax) - Math.log10(yMin))) * h;
  const out = [];
  out.push(
    `<text x="${x0 + w / 2}" y="${y0 - 14}" text-anchor="middle" font-size="15" font-weight="bold">${esc(title)}</text>`,
  );
  out.push(`<rect x="${x0}" y="${y0}" width="${w}" height="${h}" fill="none" stroke="#999"/>`);
  for (const t of niceLogTicks(yMin, yMax)) {
    const y = py(t);
    out.push(`<line x1="${x0}" y1="${y}" x2="${x0 + w}" y2="${y}" stroke="#eee"/>`);
    out.push(`<text x="${x0 - 6}" y="${y + 4}" text-anchor="end" font-size="11">${label(t)}</text>`);
  }
  for (const n of counts) {
    const x = px(n);
    out.push(`<line x1="${x}" y1="${y0}" x2="${x}" y2="${y0 + h}" stroke="#eee"/>`);
    out.push(`<text x="${x}" y="${y0 + h + 16}" text-anchor="middle" font-size="11">${n}</text>`);
  }
  out.push(
    `<text x="${x0 + w / 2}" y="${y0 + h + 34}" text-anchor="middle" font-size="12">clients (one process, mutex, hold 0)</text>`,
  );
  out.push(
    `<text transform="translate(${x0 - 48},${y0 + h / 2}) rotate(-90)" text-anchor="middle" font-size="12">${esc(yLabel)}</text>`,
  );
  for (const s of series) {
    const pts = s.points.filter((p) => p[metric] !== null && p[metric] > 0);
    if (pts.length === 0) continue;
    const d = pts
      .map((p, i) => `${i === 0 ? 'M' : 'L'}${px(p.clients).toFixed(1)},${py(p[metric]).toFixed(1)}`)
      .join(' ');
    out.push(
      `<path d="${d}" fill="none" stroke="${s.color}" stroke-width="${s.bold ? 3 : 2}"${s.dash ? ' stroke-dasharray="6 4"' : ''}/>`,
    );
    for (const p of pts)
      out.push(`<circle cx="${px(p.clients).toFixed(1)}" cy="${py(p[metric]).toFixed(1)}" r="3" fill="${s.color}"/>`);
  }
  return out.join('\n');
}

function chart({ counts, points }, subtitle) {
  const series = Object.entries(points).map(([id, pts]) => ({
    id,
    name: CONTENDERS[id].short,
    color: CONTENDERS[id].color,
    bold: id === 'lib',
    dash: id === 'bare',
    points: pts,
  }));
  const width = 1000;
  const height = 470;
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="Helvetica, Arial, sans-serif">`,
    `<rect width="${width}" height="${height}" fill="white"/>`,
    `<text x="${width / 2}" y="22" text-anchor="middle" font-size="16">${esc(subtitle)}</text>`,
    panel({
      x0: 80,
      y0: 70,
      w: 380,
      h: 300,
      title: 'Throughput',
      yLabel: 'lock + unlock cycles/s (log)',
      series,
      metric: 'cyclesPerSec',
      counts,
    }),
    panel({
      x0: 580,
      y0: 70,
      w: 380,
      h: 300,
      title: 'p99 acquire wait',
      yLabel: 'ms (log)',
      series,
      metric: 'waitP99',
      counts,
    }),
  ];
  series.forEach((s, i) => {
    const x = 40 + i * 190;
    const y = 440;
    parts.push(
      `<line x1="${x}" y1="${y - 4}" x2="${x + 24}" y2="${y - 4}" stroke="${s.color}" stroke-width="${s.bold ? 3 : 2}"${s.dash ? ' stroke-dasharray="6 4"' : ''}/>`,
    );
    parts.push(`<text x="${x + 30}" y="${y}" font-size="12">${esc(s.name)}</text>`);
  });
  parts.push('</svg>');
  return parts.join('\n');
}

module.exports = { chart };
