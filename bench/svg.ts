/**
 * Grouped horizontal bar charts as a plain SVG string: results stay viewable on any Git host
 * without a charting dependency.
 */

export interface BarGroup {
  readonly label: string;
  /** One value per series, in series order; undefined leaves a gap. */
  readonly values: readonly (number | undefined)[];
}

export interface BarPanel {
  readonly title: string;
  readonly unit: string;
  readonly groups: readonly BarGroup[];
  /** Draws a dashed reference line at this value (for example "1 x L"). */
  readonly reference?: number;
  readonly decimals?: number;
}

const COLOURS = ['#4e79a7', '#f28e2b', '#59a14f', '#e15759', '#76b7b2', '#edc948'];

function esc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

/** Renders panels stacked vertically, sharing one legend for the series. */
export function barChartSvg(opts: { title: string; series: readonly string[]; panels: readonly BarPanel[]; width?: number }): string {
  const width = opts.width ?? 860;
  const labelW = 230;
  const plotW = width - labelW - 90;
  const barH = 12;
  const groupGap = 10;
  const out: string[] = [];
  let y = 30;
  out.push(`<text x="${width / 2}" y="20" text-anchor="middle" font-size="15" font-weight="bold">${esc(opts.title)}</text>`);
  // Legend
  let lx = labelW;
  opts.series.forEach((s, i) => {
    out.push(`<rect x="${lx}" y="${y}" width="12" height="12" fill="${COLOURS[i % COLOURS.length]}"/>`);
    out.push(`<text x="${lx + 16}" y="${y + 10}" font-size="12">${esc(s)}</text>`);
    lx += 24 + s.length * 7;
  });
  y += 30;
  for (const panel of opts.panels) {
    const all = panel.groups.flatMap((g) => g.values.filter((v): v is number => v !== undefined && Number.isFinite(v)));
    const max = Math.max(panel.reference ?? 0, ...all, 1e-9) * 1.08;
    const scale = (v: number): number => (v / max) * plotW;
    out.push(`<text x="10" y="${y + 12}" font-size="13" font-weight="bold">${esc(panel.title)} (${esc(panel.unit)})</text>`);
    y += 22;
    const top = y;
    for (const g of panel.groups) {
      const h = g.values.length * barH;
      out.push(`<text x="${labelW - 8}" y="${y + h / 2 + 4}" text-anchor="end" font-size="12">${esc(g.label)}</text>`);
      g.values.forEach((v, i) => {
        if (v === undefined || !Number.isFinite(v)) return;
        const w = Math.max(scale(v), 0.5);
        out.push(`<rect x="${labelW}" y="${y + i * barH}" width="${w.toFixed(1)}" height="${barH - 2}" fill="${COLOURS[i % COLOURS.length]}"/>`);
        out.push(`<text x="${(labelW + w + 4).toFixed(1)}" y="${y + i * barH + 9}" font-size="10">${v.toFixed(panel.decimals ?? 2)}</text>`);
      });
      y += h + groupGap;
    }
    out.push(`<line x1="${labelW}" y1="${top - 4}" x2="${labelW}" y2="${y - groupGap + 4}" stroke="#333"/>`);
    if (panel.reference !== undefined) {
      const rx = (labelW + scale(panel.reference)).toFixed(1);
      out.push(`<line x1="${rx}" y1="${top - 4}" x2="${rx}" y2="${y - groupGap + 4}" stroke="#888" stroke-dasharray="4 3"/>`);
    }
    y += 16;
  }
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${y}" viewBox="0 0 ${width} ${y}" font-family="sans-serif">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    ...out,
    '</svg>',
    '',
  ].join('\n');
}
