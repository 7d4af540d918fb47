// Pinning V8's schedule inside a kernel's loop body.
//
// V8 issues the loads of a loop body as early as their order on its effect chain allows and
// places the arithmetic late, next to its uses, so a long unrolled body gets all its loads at the
// top and spills half the loaded vectors to the stack (xmm registers run out at 15). A write that
// is itself on the effect chain, placed after one step's arithmetic, makes that arithmetic happen
// before the next step's loads. pin() writes a value to a wasm global: globals belong to one
// instance, i.e. to one pool thread, so the write costs a store to memory no other core touches.
// (The first version stored to a static line in the shared memory; two threads writing the same
// line took turns owning it, and 2-thread decode fell below 1-thread.) schedule_pins() reads the
// globals so that the optimizer keeps the writes.

let PIN_A: v128 = i64x2.splat(0);
let PIN_B: v128 = i64x2.splat(0);

/** Pins the computation of a before whatever loads follow. */
@inline function pin(a: v128): void {
  PIN_A = a;
}

/** Pins the computation of a and b before whatever loads follow. */
@inline function pin2(a: v128, b: v128): void {
  PIN_A = a;
  PIN_B = b;
}

/** Reads the pinned values (nothing uses the result). */
export function schedule_pins(): i32 {
  return i32x4.extract_lane(PIN_A, 0) ^ i32x4.extract_lane(PIN_B, 0);
}

export { pin, pin2 };
