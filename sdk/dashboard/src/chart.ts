// Usage per turn as a small uPlot chart: input and output tokens (bars), cost used so far (line).
import uPlot from "uplot";
import type { UsageBlock } from "@rawp/client";

export class UsageChart {
  private plot: uPlot | null = null;
  private count = -1;
  private width = 0;
  constructor(private readonly box: HTMLElement) {}

  update(usage: UsageBlock[]): void {
    this.box.hidden = usage.length === 0;
    if (usage.length === 0) {
      this.count = 0;
      return;
    }
    const width = Math.max(240, Math.min(this.box.clientWidth || 600, 900));
    if (usage.length === this.count && width === this.width) return;
    this.count = usage.length;
    const xs = usage.map((_, i) => i + 1);
    const data: uPlot.AlignedData = [
      xs,
      usage.map((u) => u.input_tokens),
      usage.map((u) => u.output_tokens),
      usage.map((u) => u.cost_used),
    ];
    if (this.plot !== null && width === this.width) {
      this.plot.setData(data);
      return;
    }
    this.width = width;
    this.plot?.destroy();
    const unit = usage[usage.length - 1]!.cost_unit || "cost";
    const bars = uPlot.paths.bars!({ size: [0.35, 40], gap: 1 });
    this.plot = new uPlot(
      {
        width,
        height: 110,
        cursor: { drag: { x: false, y: false } },
        legend: { show: true },
        scales: { x: { time: false, range: (_u, _min, max) => [0.5, Math.max(max, 1) + 0.5] }, cost: { auto: true } },
        axes: [
          {
            label: "turn", stroke: "currentColor", grid: { show: false }, labelSize: 16, size: 30,
            incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000], values: (_u, splits) => splits.map((v) => String(v)),
          },
          { label: "tokens", stroke: "currentColor", size: 50 },
          { scale: "cost", side: 1, label: unit, stroke: "currentColor", grid: { show: false }, size: 50 },
        ],
        series: [
          { label: "turn" },
          { label: "input tokens", stroke: "#4c7bd9", fill: "rgba(76,123,217,0.45)", paths: bars },
          { label: "output tokens", stroke: "#2f9e6f", fill: "rgba(47,158,111,0.45)", paths: bars },
          { label: `cost used (${unit})`, scale: "cost", stroke: "#d9822b", width: 2, points: { show: true } },
        ],
      },
      data,
      this.box,
    );
  }
}
