"""The template sandbox caps what one operation may build: `+` and `~` (in a
loop they double a string each turn), and the padding that `%`, `format`,
`center`, `indent` and the str padding methods add. Each case below would
build about 2 MB, over the 1 MB cap, without it."""

from __future__ import annotations

import pytest

from rotor.model.template import ChatTemplate, TemplateError

MESSAGES = [{"role": "user", "content": "hi"}]
BIG = 2_000_000

TOO_LARGE = {
    "+ strings": "{% set a = 'x' * 900000 %}{{ (a + a)|length }}",
    "+ lists": "{% set a = ['x'] * 900000 %}{{ (a + a)|length }}",
    "+ in a loop": (
        "{% set ns = namespace(s='x') %}{% for i in range(21) %}"
        "{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s|length }}"
    ),
    "~ in a loop": (
        "{% set ns = namespace(s='x') %}{% for i in range(21) %}"
        "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}"
    ),
    "center filter": f"{{{{ ('x'|center({BIG}))|length }}}}",
    "center method": f"{{{{ 'x'.center({BIG})|length }}}}",
    "ljust method": f"{{{{ 'x'.ljust({BIG})|length }}}}",
    "zfill method": f"{{{{ '1'.zfill({BIG})|length }}}}",
    "% width": f"{{{{ ('%{BIG}s' % 'x')|length }}}}",
    "% precision": f"{{{{ ('%.{BIG}d' % 1)|length }}}}",
    "% star width": f"{{{{ ('%*s' % ({BIG}, 'x'))|length }}}}",
    "format filter": f"{{{{ ('%{BIG}s'|format('x'))|length }}}}",
    "indent filter": "{{ (('a\\n' * 1000)|indent(2000))|length }}",
}


@pytest.mark.parametrize("source", TOO_LARGE.values(), ids=TOO_LARGE.keys())
def test_large_values_are_refused(source: str) -> None:
    with pytest.raises(TemplateError, match="too large|that large"):
        ChatTemplate(source).render(MESSAGES)


def test_ordinary_use_is_unchanged() -> None:
    source = (
        "{{ 'a' + 'b' }}|{{ 1 + 2 }}|{{ [1] + [2] }}|{{ 'x' ~ 1 ~ none }}|"
        "{{ '%-4s|%3d|%.2f' % ('ab', 7, 1.5) }}|{{ '%s!'|format('hi') }}|"
        "{{ 'x'|center(5) }}|{{ 'x'.rjust(3) }}|{{ 'a\nb'|indent(2) }}|{{ 7 % 3 }}|"
        "{% autoescape true %}{{ '<' ~ 'b' }}{% endautoescape %}"
    )
    out = ChatTemplate(source).render(MESSAGES, add_generation_prompt=False)
    assert out == "ab|3|[1, 2]|x1None|ab  |  7|1.50|hi!|  x  |  x|a\n  b|1|&lt;b"
