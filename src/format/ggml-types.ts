/**
 * The ggml tensor types this engine knows, with their block geometry.
 * A tensor row of `n` elements of a block type occupies (n / blockSize) * typeSize bytes
 * (traitsBytes; tensorBytes from a type id).
 * Numeric ids are the ones GGUF files store (ggml.h `enum ggml_type`).
 */
export enum GGMLType {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
  /** OCP microscaling FP4: 32 e2m1 values sharing one power-of-two (E8M0) scale; gpt-oss's experts */
  MXFP4 = 39,
}

export interface TypeTraits {
  readonly name: string;
  /** elements per block */
  readonly blockSize: number;
  /** bytes per block */
  readonly typeSize: number;
  /** whether the engine can compute with it */
  readonly supported: boolean;
}

const T = (name: string, blockSize: number, typeSize: number, supported = true): TypeTraits => ({
  name,
  blockSize,
  typeSize,
  supported,
});

const TRAITS: Partial<Record<GGMLType, TypeTraits>> = {
  [GGMLType.F32]: T("F32", 1, 4),
  [GGMLType.F16]: T("F16", 1, 2),
  [GGMLType.BF16]: T("BF16", 1, 2),
  [GGMLType.Q4_0]: T("Q4_0", 32, 18),
  [GGMLType.Q4_1]: T("Q4_1", 32, 20),
  [GGMLType.Q5_0]: T("Q5_0", 32, 22),
  [GGMLType.Q5_1]: T("Q5_1", 32, 24),
  [GGMLType.Q8_0]: T("Q8_0", 32, 34),
  [GGMLType.Q8_1]: T("Q8_1", 32, 36, false),
  [GGMLType.Q2_K]: T("Q2_K", 256, 84, false),
  [GGMLType.Q3_K]: T("Q3_K", 256, 110, false),
  [GGMLType.Q4_K]: T("Q4_K", 256, 144),
  [GGMLType.Q5_K]: T("Q5_K", 256, 176),
  [GGMLType.Q6_K]: T("Q6_K", 256, 210),
  [GGMLType.Q8_K]: T("Q8_K", 256, 292, false),
  [GGMLType.MXFP4]: T("MXFP4", 32, 17),
  [GGMLType.I8]: T("I8", 1, 1, false),
  [GGMLType.I16]: T("I16", 1, 2, false),
  [GGMLType.I32]: T("I32", 1, 4, false),
  [GGMLType.I64]: T("I64", 1, 8, false),
  [GGMLType.F64]: T("F64", 1, 8, false),
};

/** Traits of a type id, or undefined for an id this engine has never heard of. */
export function typeTraits(type: number): TypeTraits | undefined {
  return TRAITS[type as GGMLType];
}

export function typeName(type: number): string {
  return typeTraits(type)?.name ?? `unknown(${type})`;
}

/**
 * Bytes taken by `elements` values of a type with traits `t` (elements must be a multiple of the
 * block size): the one place the formula is written, for callers that already hold the traits.
 */
export function traitsBytes(t: TypeTraits, elements: number): number {
  return (elements / t.blockSize) * t.typeSize;
}

/** Bytes taken by `elements` values of `type` (elements must be a multiple of the block size). */
export function tensorBytes(type: GGMLType, elements: number): number {
  return traitsBytes(typeTraits(type)!, elements);
}

/** Parse a type name such as "q4_0" or "F16" (case-insensitive). */
export function typeFromName(name: string): GGMLType | undefined {
  const up = name.toUpperCase();
  for (const [id, t] of Object.entries(TRAITS)) if (t!.name === up) return Number(id) as GGMLType;
  return undefined;
}

/**
 * llama.cpp's `general.file_type` (its llama_ftype, "mostly" this type: norms and other 1-D
 * tensors stay F32) for the output types the writers here make.
 */
export const LLAMA_FILE_TYPE = {
  f32: 0,
  f16: 1,
  q4_0: 2,
  q4_1: 3,
  q8_0: 7,
  q5_0: 8,
  q5_1: 9,
  bf16: 32,
  mxfp4: 38, // MOSTLY_MXFP4_MOE: the experts' matrices
} as const;
