/** The normal distribution, as planted sparsity needs it (biases from firing rates, moments of ReLU outputs). */

/** Complementary error function, accurate to ~1e-11 relative in the range used here. */
function erfc(x: number): number {
  if (x < 0) return 2 - erfc(-x);
  if (x < 3) {
    // erf(x) = 2/sqrt(pi) e^(-x^2) sum_n 2^n x^(2n+1) / (1*3*...*(2n+1)): positive terms only
    let term = x;
    let sum = x;
    for (let n = 1; n < 300 && term > 1e-17 * sum; n++) {
      term *= (2 * x * x) / (2 * n + 1);
      sum += term;
    }
    return 1 - (2 / Math.sqrt(Math.PI)) * Math.exp(-x * x) * sum;
  }
  // continued fraction e^(-x^2)/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + ...)))), from the tail
  let f = x;
  for (let k = 80; k >= 1; k--) f = x + k / 2 / f;
  return Math.exp(-x * x) / Math.sqrt(Math.PI) / f;
}

export function normCdf(z: number): number {
  return 0.5 * erfc(-z / Math.SQRT2);
}

export function normPdf(z: number): number {
  return Math.exp(-0.5 * z * z) / Math.sqrt(2 * Math.PI);
}

/** PhiInverse(p): Newton steps inside a shrinking bracket. */
export function normQuantile(p: number): number {
  if (!(p > 0 && p < 1)) throw new RangeError(`normal quantile: p must be in (0, 1), got ${p}`);
  let lo = -40;
  let hi = 40;
  let z = 0;
  for (let it = 0; it < 200; it++) {
    const f = normCdf(z) - p;
    if (f > 0) hi = z;
    else lo = z;
    let nz = z - f / normPdf(z);
    if (!(nz > lo && nz < hi)) nz = (lo + hi) / 2;
    if (Math.abs(nz - z) < 1e-12) return nz;
    z = nz;
  }
  return z;
}

/** E[relu(X)] / s and E[relu(X)^2] / s^2 for X ~ N(z s, s^2). */
export function reluMoments(z: number): [number, number] {
  const P = normCdf(z);
  const q = normPdf(z);
  return [z * P + q, (z * z + 1) * P + z * q];
}
