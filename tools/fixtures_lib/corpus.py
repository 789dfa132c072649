"""Training text for the fixture tokenizers and the prompt texts (all written for this project)."""

# A few KB of plain English with digits, punctuation, newlines and a little non-ASCII text, so the
# byte-level BPE learns ordinary merges ("Ġthe", "ing") and the prompts exercise several token kinds.
TRAINING_TEXT = """\
The river runs past the old mill and under the stone bridge before it reaches the sea.
In the spring the water is high and brown; in the autumn it is low, clear and cold.
People in the village say that the mill was built in 1832, and that it ground wheat for
more than a hundred years. Today it is a small museum with a café on the ground floor.

The baker opens at six in the morning. She makes bread, rolls and a sweet cake with apples
and cinnamon. On Saturdays there is a market in the square: farmers bring cheese, eggs,
honey, potatoes, carrots and onions, and the fisherman sells what he caught the night before.
Children run between the stalls while their parents talk about the weather and the harvest.

A small language model reads text one token at a time. Each token is a number that stands for
a piece of a word, a whole word, a space or a sign such as a comma. The model turns every token
into a vector, mixes the vectors with attention, and predicts the next token from the result.
If the model is pruned, half of its weights are set to zero; if it is quantized, the remaining
weights are stored with fewer bits. Both make the model smaller and faster to move.

"Where are you going?" asked the fox. "To the hill," said the hare, "where the grass is green
and the wind is gentle." The fox laughed: "Then I will come with you, for I am hungry, and the
hill is far." The hare thought for a moment, turned around, and ran back into the forest.

Numbers appear in many texts: 3 apples, 12 eggs, 256 bytes, 4096 tokens, 3.14159, 2024-05-17,
and 10:30 in the morning. Prices are written as $4.99 or 7,50 EUR. A list can look like this:
first, second, third; or like this: (a) read, (b) write, (c) run.

The weather was cold and wet for most of the week. On Thursday the sun came out, the roads
dried, and everyone went outside. The teacher took the class to the river, where they counted
birds, measured the water and drew the bridge. In the evening the sky turned red and orange,
and the first stars appeared over the hills. Tomorrow, they said, it will rain again.

Über den Fluss führt eine Brücke. Le pain est chaud. El río es largo. Naïve façade, déjà vu.

def add(a, b):
    return a + b

for i in range(10):
    print(i, add(i, i))

The quick brown fox jumps over the lazy dog. The lazy dog sleeps in the sun all afternoon.
When the sun goes down, the dog wakes up, walks to the door and waits for its dinner.
The cat watches from the window and says nothing at all, as cats usually do.
"""

# Prompt texts, encoded with the model's tokenizer (ids are what the references use). Index 0 is
# the one continued greedily. The lengths differ and stay <= 12 tokens (with BOS) so .npy files stay
# small; the last one is longer than mistral-tiny's sliding window of 4.
PROMPT_TEXTS = [
    "The fox said: 12 eggs",
    "Hello",
    "A café opens at six",
]

# llama3-rope replaces the last prompt by a longer one (> original_max_position_embeddings = 32
# tokens) so positions beyond the original context are covered too.
LONG_PROMPT_TEXT = (
    "The river runs past the old mill and under the stone bridge before it reaches the sea. "
    "In the spring the water"
)
