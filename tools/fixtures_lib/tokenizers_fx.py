"""Tiny byte-level BPE tokenizers trained with the `tokenizers` package (deterministic).

Two styles, both with vocab_size entries in total:
- OPT / GPT-2 style: specials <s>=0 <pad>=1 </s>=2 <unk>=3 first, GPT-2 split regex
  (ByteLevel use_regex, add_prefix_space false); the post-processor prepends </s> (id 2) as BOS,
  as OPT's tokenizer does.
- Llama-3 style: Llama-3's split regex, specials at the END of the vocabulary
  (<|begin_of_text|> = V-2, <|end_of_text|> = V-1); the post-processor prepends <|begin_of_text|>.
"""
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers, Regex

from .corpus import TRAINING_TEXT

OPT_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>"]
LLAMA3_SPLIT_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _training_lines():
    return TRAINING_TEXT.splitlines(keepends=True)


def build_opt_tokenizer(vocab_size: int) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=OPT_SPECIALS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_training_lines(), trainer=trainer)
    assert tok.get_vocab_size() == vocab_size, tok.get_vocab_size()
    assert [tok.token_to_id(t) for t in OPT_SPECIALS] == [0, 1, 2, 3]
    tok.post_processor = processors.TemplateProcessing(
        single="</s> $A", pair="</s> $A </s> $B", special_tokens=[("</s>", 2)])
    return tok


def build_llama3_tokenizer(vocab_size: int) -> Tokenizer:
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT_REGEX), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    n_learned = vocab_size - len(LLAMA3_SPECIALS)
    trainer = trainers.BpeTrainer(
        vocab_size=n_learned, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_training_lines(), trainer=trainer)
    assert tok.get_vocab_size() == n_learned, tok.get_vocab_size()
    tok.add_special_tokens(LLAMA3_SPECIALS)
    bos = tok.token_to_id(LLAMA3_SPECIALS[0])
    assert bos == vocab_size - 2 and tok.token_to_id(LLAMA3_SPECIALS[1]) == vocab_size - 1
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
        special_tokens=[("<|begin_of_text|>", bos)])
    return tok
