export { Tokenizer, type EncodeOptions, type DecodeOptions } from "./tokenizer.js";
export { StreamingDecoder, type StreamingDecoderOptions } from "./streaming.js";
export { TokenizerError, TokenType, TokenAttr, type TokenizerMetadataSource, type VocabKind } from "./vocab.js";
export { preTokenize, preTokenizerConfig, type PreTokenizerConfig, type PreTokenizerView } from "./pretokenize.js";
