"""Templates from strangers are bounded: each hostile one below stops with a sentence, fast,
instead of freezing the process or exhausting its memory; ordinary ones render as before."""

from __future__ import annotations

import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from runner.tokenizer import sandbox
from runner.tokenizer.template import render

HOSTILE = {
    "nested loops": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
                    "{% endfor %}",
    "string repetition": "{{ 'a' * 10**10 }}",
    "list repetition": "{{ ([1] * 10**9) | length }}",
    "power": "{{ 2 ** 100000000 }}",
    "doubling in a namespace": "{% set ns = namespace(s='a') %}{% for i in range(64) %}"
                               "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}",
    "center filter": "{{ 'a' | center(10**10) }}",
    "ljust method": "{{ 'a'.ljust(10**10) }}",
    "percent width": "{{ '%999999999s' % 'a' }}",
    "format width": "{{ '{:>999999999}'.format('a') }}",
    "format_map width": "{{ '{x:>999999999}'.format_map({'x': 1}) }}",
    "long output": "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}",
    # a list may hold one long string many times at no cost; its text may not
    "replace filter": "{{ ('a' * 2000) | replace('a', 'a' * 2000) | length }}",
    "replace method": "{{ ('a' * 2000).replace('a', 'a' * 2000) | length }}",
    "join filter": "{{ ([('a' * 500000)] * 20) | join | length }}",
    "join method": "{{ ''.join([('a' * 500000)] * 20) | length }}",
    "string filter": "{{ ([('a' * 500000)] * 20) | string | length }}",
    "nested list": "{% set l = [('a' * 500000)] %}{{ ([l] * 20) | string | length }}",
    "tojson filter": "{{ ([('a' * 500000)] * 20) | tojson | length }}",
    "escape filter": "{{ ('<' * 500000) | e | length }}",
    "expandtabs": "{{ ('\t' * 2000).expandtabs(2000) | length }}",
}
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture
def short_limits(monkeypatch):
    monkeypatch.setattr(sandbox, "SECONDS", 1.0)
    monkeypatch.setattr(sandbox, "LONGEST", 1 << 20)


@pytest.mark.parametrize("template", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_template_stops_with_a_sentence(short_limits, template):
    with pytest.raises(ValueError, match="The chat template failed: the template"):
        render(template, MESSAGES)


def test_an_ordinary_template_renders_as_jinjas_sandbox_renders_it():
    template = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content | trim }}"
                "{{ '%-6s|' % m.role }}{{ '{:>4}'.format(loop.index) }}\n{% endfor %}"
                "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    messages = [{"role": "user", "content": f" message {i} " * 50} for i in range(300)]
    plain = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    expected = plain.from_string(template).render(messages=messages,
                                                  add_generation_prompt=True)
    assert render(template, messages) == expected


def test_a_template_changes_its_own_lists_and_dicts_and_not_the_callers():
    template = ("{% set seen = [] %}{% set names = {} %}{% for m in messages %}"
                "{% set _ = seen.append(m.role) %}{% set _ = names.update({m.role: 1}) %}"
                "{% set _ = m.update({'content': 'changed'}) %}{% endfor %}"
                "{{ seen | join(',') }}|{{ names | list | join(',') }}|{{ messages[0].content }}")
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    assert render(template, messages) == "user,assistant|user,assistant|changed"
    assert messages == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]


def test_a_list_a_template_grows_past_the_limit_stops_it(short_limits):
    template = ("{% set items = [] %}{% for i in range(100000) %}{% for j in range(100) %}"
                "{% set _ = items.append(j) %}{% endfor %}{% endfor %}{{ items | length }}")
    with pytest.raises(ValueError, match="The chat template failed: the template"):
        render(template, MESSAGES)


def test_the_generation_mark_renders_its_body():
    template = ("{% for m in messages %}<{{ m.role }}>{% generation %}{{ m.content }}"
                "{% endgeneration %}{% endfor %}")
    assert render(template, MESSAGES) == "<user>hi"


def test_lipsum_is_not_offered():
    """Jinja's filler text runs for minutes at lipsum(1000000), and no chat template uses
    it."""
    with pytest.raises(ValueError, match="'lipsum' is undefined"):
        render("{{ lipsum(1000000) }}", MESSAGES)


def test_the_text_weight_counts_a_string_each_time_a_list_holds_it():
    long = "a" * 1000
    shared = [long]
    assert sandbox.text_weight([long] * 10) >= 10_000
    assert sandbox.text_weight({"k": [shared, shared, shared]}) >= 3000
    looped: list = [long]
    looped.append(looped)
    assert 1000 <= sandbox.text_weight(looped) < 2000
