/**
 * GET /metrics: the Prometheus text format. Counters and gauges llama-server also exports keep
 * its names (`llamacpp:*`), so dashboards made for it read these; the rest are `powerinfer:*`:
 * requests by outcome, and for a neuron store the neuron cache's hits and misses and the bytes
 * read from flash.
 */
import { offloadFigures } from "../../model/offload/stats.js";
import type { Route } from "./route.js";

interface Metric {
  name: string;
  type: "counter" | "gauge";
  help: string;
  /** one sample, or samples by label set ("" for none) */
  values: number | [labels: string, value: number][];
}

/** Renders metrics in the text exposition format (version 0.0.4). */
export function renderMetrics(metrics: Metric[]): string {
  const lines: string[] = [];
  for (const m of metrics) {
    lines.push(`# HELP ${m.name} ${m.help}`, `# TYPE ${m.name} ${m.type}`);
    const samples: [string, number][] = typeof m.values === "number" ? [["", m.values]] : m.values;
    for (const [labels, v] of samples) lines.push(`${m.name}${labels ? `{${labels}}` : ""} ${formatValue(v)}`);
  }
  return lines.join("\n") + "\n";
}

function formatValue(v: number): string {
  if (Number.isNaN(v)) return "NaN";
  if (v === Infinity) return "+Inf";
  if (v === -Infinity) return "-Inf";
  return String(v);
}

export const metricsRoute: Route = {
  method: "GET",
  handle(ctx) {
    const m = ctx.metrics;
    const metrics: Metric[] = [
      {
        name: "llamacpp:prompt_tokens_total",
        type: "counter",
        help: "Prompt tokens processed.",
        values: m.promptTokens,
      },
      {
        name: "llamacpp:prompt_seconds_total",
        type: "counter",
        help: "Prompt processing time, in seconds.",
        values: m.promptSeconds,
      },
      {
        name: "llamacpp:tokens_predicted_total",
        type: "counter",
        help: "Tokens generated.",
        values: m.generatedTokens,
      },
      {
        name: "llamacpp:tokens_predicted_seconds_total",
        type: "counter",
        help: "Generation time, in seconds.",
        values: m.decodeSeconds,
      },
      {
        name: "llamacpp:prompt_tokens_seconds",
        type: "gauge",
        help: "Average prompt throughput, in tokens per second.",
        values: m.promptSeconds > 0 ? m.promptTokens / m.promptSeconds : 0,
      },
      {
        name: "llamacpp:predicted_tokens_seconds",
        type: "gauge",
        help: "Average generation throughput, in tokens per second.",
        values: m.decodeSeconds > 0 ? m.generatedTokens / m.decodeSeconds : 0,
      },
      {
        name: "llamacpp:requests_processing",
        type: "gauge",
        help: "Requests generating now (one model runs one at a time).",
        values: Math.min(1, m.active),
      },
      {
        name: "llamacpp:requests_deferred",
        type: "gauge",
        help: "Requests waiting in the queue for the model.",
        values: ctx.waiting,
      },
      {
        name: "powerinfer:requests_total",
        type: "counter",
        help: "Completion requests finished, by outcome.",
        values: [
          ['outcome="completed"', m.completed],
          ['outcome="aborted"', m.aborted],
          ['outcome="rejected"', m.rejected],
          ['outcome="failed"', m.failed],
        ],
      },
      {
        name: "powerinfer:last_decode_tokens_per_second",
        type: "gauge",
        help: "Decode speed of the last finished generation.",
        values: m.lastDecodeTokensPerSecond,
      },
    ];
    const off = ctx.model.offloadStats?.();
    if (off) {
      const { hitRate } = offloadFigures(off);
      metrics.push(
        {
          name: "powerinfer:neuron_cache_hits_total",
          type: "counter",
          help: "Neuron bundles found in the neuron cache, by region.",
          values: [
            ['region="hot"', off.hotHits],
            ['region="cold"', off.coldHits],
          ],
        },
        {
          name: "powerinfer:neuron_cache_misses_total",
          type: "counter",
          help: "Neuron bundles read from flash because they were not cached (read-ahead included).",
          values: off.misses,
        },
        {
          name: "powerinfer:neuron_cache_hit_ratio",
          type: "gauge",
          help: "Hits over lookups since the model loaded.",
          values: hitRate,
        },
        {
          name: "powerinfer:flash_read_bytes_total",
          type: "counter",
          help: "Bytes read from the neuron store.",
          values: off.bytesRead,
        },
        {
          name: "powerinfer:flash_wait_seconds_total",
          type: "counter",
          help: "Time the FFN waited for reads from flash, in seconds.",
          values: off.ioWaitMs / 1000,
        },
        {
          name: "powerinfer:ffn_neurons_computed_ratio",
          type: "gauge",
          help: "Share of FFN neurons computed (the rest were predicted or found inactive).",
          values: off.neuronsTotal > 0 ? off.neuronsComputed / off.neuronsTotal : 0,
        },
      );
    }
    return { text: renderMetrics(metrics), contentType: "text/plain; version=0.0.4; charset=utf-8" };
  },
};
