/**
 * MXFP4 matrices as gpt-oss's published checkpoints store them, made into ggml's MXFP4 rows.
 *
 * The checkpoint keeps each expert matrix ([experts, rows, row length], output-major: a row is
 * one output's weights) as two U8 tensors: `*_blocks` [experts, rows, row length / 32, 16], each
 * 32-value block's e2m1 codes two to a byte with the even-indexed value in the low nibble, and
 * `*_scales` [experts, rows, row length / 32], each block's E8M0 exponent (2^(e - 127)). A ggml
 * MXFP4 block (mxfp4.ts) is the same exponent byte followed by 16 bytes holding value j in the
 * low nibble and value j + 16 in the high one: the codes move between nibbles, no value changes,
 * so the GGUF holds exactly the checkpoint's numbers (llama.cpp's converter repacks the same way).
 */
import { MXFP4_BLOCK_BYTES } from "../mxfp4.js";

/** Values in one MXFP4 block, and the checkpoint's bytes of codes per block. */
export const MXFP4_BLOCK_VALUES = 32;
export const HF_MXFP4_CODE_BYTES = 16;

/**
 * `nBlocks` blocks of one row: codes from `blocks` (16 bytes a block, the checkpoint's nibble
 * order) at `bOff` and exponents from `scales` at `sOff`, written as ggml MXFP4 blocks to
 * dst[dOff..].
 */
export function repackMxfp4Row(
  blocks: Uint8Array,
  bOff: number,
  scales: Uint8Array,
  sOff: number,
  nBlocks: number,
  dst: Uint8Array,
  dOff: number,
): void {
  for (let b = 0; b < nBlocks; b++) {
    const src = bOff + b * HF_MXFP4_CODE_BYTES;
    const out = dOff + b * MXFP4_BLOCK_BYTES;
    dst[out] = scales[sOff + b];
    // value k is byte k >> 1's low nibble for even k, its high nibble for odd k; ggml's byte j
    // holds value j (low) and value j + 16 (high): values 2i, 2i + 1 from the first eight bytes,
    // values 16 + 2i, 17 + 2i from the last eight
    for (let i = 0; i < 8; i++) {
      const lo = blocks[src + i],
        hi = blocks[src + 8 + i];
      dst[out + 1 + 2 * i] = (lo & 15) | ((hi & 15) << 4);
      dst[out + 2 + 2 * i] = (lo >> 4) | (hi & 0xf0);
    }
  }
}
