/**
 * Picking every `step`-th column of a row-major block, optionally transposed: how transformers'
 * fused gpt-oss experts become ggml's stacked matrices. Their gate_up_proj [E, in, 2 ff] holds
 * gate and up interleaved along its last axis (gate at even columns, up at odd) and is applied
 * as x @ W, so each expert's matrix is the transpose of what ggml multiplies by.
 */
import type { ColumnPick } from "./plan.js";

/** How many columns `pick` takes from rows of `width` values. */
export function pickedCount(width: number, pick: ColumnPick): number {
  return pick.first >= width ? 0 : Math.ceil((width - pick.first) / pick.step);
}

/**
 * From `rows` rows of `width` values in `src`: with `pick.transpose`, dst row c is picked column
 * c read down the rows (rows values each); without, dst row r is row r's picked values.
 */
export function pickColumns(src: Float32Array, rows: number, width: number, pick: ColumnPick, dst: Float32Array): void {
  const n = pickedCount(width, pick);
  for (let r = 0; r < rows; r++)
    for (let c = 0; c < n; c++) {
      const v = src[r * width + pick.first + c * pick.step];
      if (pick.transpose) dst[c * rows + r] = v;
      else dst[r * n + c] = v;
    }
}
