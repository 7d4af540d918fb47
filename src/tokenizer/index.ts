export { Tokenizer, type EncodeOptions, type DecodeOptions } from "./tokenizer.js";
export { StreamingDecoder, type StreamingDecoderOptions } from "./streaming.js";
export { TokenizerError, TokenType, type TokenizerMetadataSource, type VocabKind } from "./vocab.js";
export { preTokenize, preTokenizerConfig, type PreTokenizerConfig } from "./pretokenize.js";
