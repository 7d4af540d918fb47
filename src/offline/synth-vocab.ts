/**
 * A SentencePiece-style ("llama") vocabulary for synthetic models, laid out as LLaMA's is:
 *
 *   0 <unk> (type 2, unknown), 1 <s>, 2 </s> (type 3, control),
 *   3..258 the byte-fallback tokens <0x00>..<0xFF> (type 6),
 *   then ordinary pieces (type 1) with descending scores.
 *
 * llama.cpp's SPM tokenizer starts from single characters and repeatedly merges the adjacent
 * pair whose concatenation is a piece (highest score first); whatever no piece covers falls back
 * to bytes. So the ordinary pieces are built prefix-closed: every piece's proper prefixes are
 * pieces too, which gives the merges a path to every multi-character piece. The vocabulary is a
 * pure function of its size (like a real model's tokenizer, it does not vary with the weights'
 * seed) and holds no duplicates.
 */

export const TOKEN_TYPE = { NORMAL: 1, UNKNOWN: 2, CONTROL: 3, USER_DEFINED: 4, UNUSED: 5, BYTE: 6 } as const;

export interface SynthVocab {
  tokens: string[];
  scores: Float32Array;
  types: Int32Array;
  bosId: number;
  eosId: number;
  unkId: number;
}

/** SentencePiece's word-boundary mark (U+2581), which stands for a space. */
export const SPACE = "\u2581";

const SPECIALS = ["<unk>", "<s>", "</s>"];
const N_FIXED = SPECIALS.length + 256;

/** The smallest vocabulary: specials, bytes, and one piece per basic character. */
export const MIN_VOCAB = N_FIXED + 1;

// Frequent English words, most frequent first: they seed the pieces after single characters.
const WORDS = (
  "the of and to a in is it you that he was for on are with as I his they be at one have this from " +
  "or had by not word but what some we can out other were all there when up use your how said an " +
  "each she which do their time if will way about many then them write would like so these her " +
  "long make thing see him two has look more day could go come did number sound no most people my " +
  "over know water than call first who may down side been now find any new work part take get " +
  "place made live where after back little only round man year came show every good me give our " +
  "under name very through just form sentence great think say help low line differ turn cause " +
  "much mean before move right boy old too same tell does set three want air well also play small " +
  "end put home read hand port large spell add even land here must big high such follow act why " +
  "ask men change went light kind off need house picture try us again animal point mother world " +
  "near build self earth father head stand own page should country found answer school grow study " +
  "still learn plant cover food sun four between state keep eye never last let thought city tree " +
  "cross farm hard start might story saw far sea draw left late run while press close night real " +
  "life few north open seem together next white children begin got walk example ease paper group " +
  "always music those both mark often letter until mile river car feet care second book carry took " +
  "science eat room friend began idea fish mountain stop once base hear horse cut sure watch color " +
  "face wood main enough plain girl usual young ready above ever red list though feel talk bird soon " +
  "body dog family direct pose leave song measure door product black short numeral class wind " +
  "question happen complete ship area half rock order fire south problem piece told knew pass since " +
  "top whole king space heard best hour better true during hundred five remember step early hold " +
  "west ground interest reach fast verb sing listen six table travel less morning ten simple several " +
  "vowel toward war lay against pattern slow center love person money serve appear road map rain " +
  "rule govern pull cold notice voice unit power town fine certain fly fall lead cry dark machine " +
  "note wait plan figure star box noun field rest correct able pound done beauty drive stood contain " +
  "front teach week final gave green oh quick develop ocean warm free minute strong special mind " +
  "behind clear tail produce fact street inch multiply nothing course stay wheel full force blue " +
  "object decide surface deep moon island foot system busy test record boat common gold possible " +
  "plane stead dry wonder laugh thousand ago ran check game shape equate hot miss brought heat snow " +
  "tire bring yes distant fill east paint language among Once upon There The She He It They Lily Tom " +
  "happy sad play ball park friends loved wanted saw big little named day Mom"
).split(" ");

// Frequent word endings (no boundary mark: they continue a word).
const SUFFIXES = [
  "s",
  "ed",
  "ing",
  "er",
  "ly",
  "es",
  "est",
  "tion",
  "ness",
  "ment",
  "able",
  "ful",
  "less",
  "ous",
  "ive",
  "al",
  "ity",
  "ers",
  "ings",
];

const LOWER = "etaoinshrdlcumwfgypbvkjxqz";
const UPPER = "TAISOWHBCMFPDRLEGNYUVJKQXZ";
const DIGITS = "0123456789";
const PUNCT = ".,!?'\"-:;()[]{}/\\@#$%&*+=<>_~`|^";
const VOWELS = new Set([..."aeiouy"]);

/** Reject pieces nobody would see: three vowels or four consonants in a row. */
function plausible(piece: string): boolean {
  let v = 0;
  let c = 0;
  for (const ch of piece) {
    if (ch === SPACE) continue;
    if (VOWELS.has(ch)) {
      v++;
      c = 0;
    } else {
      c++;
      v = 0;
    }
    if (v >= 3 || c >= 4) return false;
  }
  return true;
}

/** The ordinary pieces, best first, until `count` of them exist. */
function ordinaryPieces(count: number): string[] {
  const pieces: string[] = [];
  const seen = new Set<string>();
  const add = (p: string): boolean => {
    if (pieces.length >= count) return false;
    if (seen.has(p)) return true;
    seen.add(p);
    pieces.push(p);
    return pieces.length < count;
  };
  // Prefix-closed insertion: each proper prefix (2 characters and up) before the piece itself.
  const addClosed = (p: string): boolean => {
    const chars = [...p];
    for (let n = 2; n <= chars.length; n++) if (!add(chars.slice(0, n).join(""))) return false;
    return true;
  };

  // Single characters first, so that even a tiny vocabulary covers plain English text.
  const singles = [SPACE, ...LOWER, ...UPPER, ...DIGITS, ...PUNCT];
  for (const ch of singles) if (!add(ch)) return pieces;
  for (const w of WORDS) if (!addClosed(SPACE + w)) return pieces;
  for (const s of SUFFIXES) if (!addClosed(s)) return pieces;
  for (const w of WORDS) if (w.length > 2 && !addClosed(w)) return pieces;

  // Fill by length: extend every piece of the previous length by a letter (frequent letters
  // first), keeping only plausible spellings, until the vocabulary is full. Extending existing
  // pieces keeps the set prefix-closed.
  let frontier = pieces.filter((p) => p === SPACE || /^[a-z\u2581]/.test(p));
  for (let len = 2; pieces.length < count && frontier.length > 0; len++) {
    const next: string[] = [];
    for (const p of frontier) {
      for (const ch of LOWER) {
        const q = p + ch;
        if ([...q].length !== len || seen.has(q) || !plausible(q)) continue;
        if (!add(q)) return pieces;
        next.push(q);
      }
    }
    // pieces already present from the word lists extend too
    frontier = [...new Set([...next, ...pieces.filter((p) => [...p].length === len && /^[a-z\u2581]/.test(p))])];
  }
  if (pieces.length < count)
    throw new Error(`synthetic vocabulary: could only make ${pieces.length} of ${count} pieces`);
  return pieces;
}

/** Build a vocabulary of exactly `size` tokens. */
export function buildSynthVocab(size: number): SynthVocab {
  if (!Number.isInteger(size) || size < MIN_VOCAB)
    throw new RangeError(`synthetic vocabulary size must be an integer >= ${MIN_VOCAB}, got ${size}`);
  const tokens: string[] = [...SPECIALS];
  for (let b = 0; b < 256; b++) tokens.push(`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`);
  const pieces = ordinaryPieces(size - N_FIXED);
  for (const p of pieces) tokens.push(p); // (not a spread: 150k arguments overflow the call stack)
  const scores = new Float32Array(size);
  const types = new Int32Array(size);
  types[0] = TOKEN_TYPE.UNKNOWN;
  types[1] = TOKEN_TYPE.CONTROL;
  types[2] = TOKEN_TYPE.CONTROL;
  for (let i = 3; i < N_FIXED; i++) types[i] = TOKEN_TYPE.BYTE;
  for (let i = N_FIXED; i < size; i++) {
    types[i] = TOKEN_TYPE.NORMAL;
    // SentencePiece scores are log-probabilities: earlier (more frequent) pieces score higher.
    scores[i] = -(i - N_FIXED);
  }
  return { tokens, scores, types, bosId: 1, eosId: 2, unkId: 0 };
}
