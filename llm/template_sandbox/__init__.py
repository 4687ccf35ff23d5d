"""Jinja2 chat templates from GGUF metadata, rendered within fixed bounds of time and memory.

A GGUF file's ``tokenizer.chat_template`` is code from whoever made the file. Jinja2's
sandbox stops it reaching Python internals but not exhausting the server: nested loops
that never finish, ``'a' * 300000000``, a macro that calls itself. The environment here
renders templates exactly as llama-cpp-python's ``Jinja2ChatFormatter`` (and Transformers)
do, with these bounds checked as the template runs:

* ``range()`` yields at most :data:`MAX_RANGE` items, and all loops of one render together
  run at most :data:`MAX_ITERATIONS` times;
* no string built by the template (by ``+``, ``*``, ``%``, ``~``, ``str.format``, a filter
  or a string method) is longer than :data:`MAX_TEXT` characters, and no list longer than
  :data:`MAX_ITEMS`; sizes are estimated *before* the work where the work could amplify its
  inputs (``'x' * n``, ``'{0}{0}'.format(s)``, ``center(n)``, ``join`` of a list that holds
  one huge string many times), so nothing large is allocated just to be refused;
* everything one render builds comes to at most :data:`MAX_BUILT_BYTES`;
* the output is streamed and stops past :data:`MAX_OUTPUT` characters;
* calls (macros, ``caller()``, recursive loops) nest at most :data:`MAX_CALL_DEPTH` deep;
* a render takes at most :data:`RENDER_SECONDS`, checked at every loop iteration, call,
  operator, filter and piece of output (a single step is bounded by the size limits).

Constant folding of filters at compile time is switched off (a filter call in a template
is work the template asks for, bounded like the rest), so compiling is linear in the
template's length, which is at most :data:`MAX_TEMPLATE_CHARS`.

The bounds and each render's budget are in :mod:`.limits`; sizes worked out before the
work in :mod:`.estimates`; the checks run from :mod:`.compiler` and :mod:`.environment`;
:mod:`.render` is the entry point.
"""

from llm.template_sandbox.environment import BoundedEnvironment, bounded_environment
from llm.template_sandbox.limits import (
    MAX_BUILT_BYTES,
    MAX_CALL_DEPTH,
    MAX_INT_BITS,
    MAX_ITEMS,
    MAX_ITERATIONS,
    MAX_OUTPUT,
    MAX_RANGE,
    MAX_TEMPLATE_CHARS,
    MAX_TEXT,
    RENDER_SECONDS,
    TemplateLimitExceeded,
    TemplateRejected,
)
from llm.template_sandbox.render import BoundedChatTemplate

__all__ = [
    "MAX_BUILT_BYTES",
    "MAX_CALL_DEPTH",
    "MAX_INT_BITS",
    "MAX_ITEMS",
    "MAX_ITERATIONS",
    "MAX_OUTPUT",
    "MAX_RANGE",
    "MAX_TEMPLATE_CHARS",
    "MAX_TEXT",
    "RENDER_SECONDS",
    "BoundedChatTemplate",
    "BoundedEnvironment",
    "TemplateLimitExceeded",
    "TemplateRejected",
    "bounded_environment",
]
