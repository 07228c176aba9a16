"""MkDocs hooks (and a Griffe extension) that generate the reference pages from the code.

Nothing on the three reference pages is copied by hand from the code; every build regenerates it
(``on_page_markdown``; nothing is written to ``docs/``, so the committed pages stay placeholders):

* ``reference/cli.md``: the Typer app (the ``orbitscope`` console script, ``orbitscope.cli:app``)
  converted with ``typer.main.get_command`` and walked through its Click objects: every command and
  subcommand (in the app's own order), its help, usage, arguments and options with their types,
  defaults and help texts.
* ``reference/orbits.md``: the orbit-spec parser's own tables (:mod:`orbitscope.group.parse`: its
  help text ``_SPEC_HELP``, its ``_RANGE_NAMES`` and the names ``_parse_single`` accepts) and the
  orbit registry ``ORBITS``. Every documented form is parsed at build time (a form the parser
  rejects fails the build) and the tables show what it builds.
* ``reference/api.md``: its bare ``::: orbitscope.X`` directives are expanded so that every public
  name (``__all__``) is documented, and each object once: the first directive (``::: orbitscope``)
  documents the whole top-level API (``members:`` = ``orbitscope.__all__``, with or without a
  docstring); each later package gets a heading, links to its names documented elsewhere on the
  page, and ``members:`` limited to the rest. A directive with its own ``options:`` is kept.

The Griffe extension :class:`SphinxCompat` (loaded by the mkdocstrings ``extensions`` option in
``mkdocs.yml``) reads the code base's Sphinx conventions: ``#:`` comments document the attribute
below them, and roles such as ``:class:`~orbitscope.Store``` become links to the API page where
the target is documented there (plain code otherwise, never a broken link).

Problems (a documented form that does not parse, a parser whose table moved) are logged as
warnings, which fail ``mkdocs build --strict``.
"""

from __future__ import annotations

import ast
import html
import importlib
import inspect
import json
import logging
import re
from types import ModuleType
from typing import Any, Iterator

import griffe

log = logging.getLogger("mkdocs.hooks.orbitscope")

CLI_PAGE = "reference/cli.md"
ORBITS_PAGE = "reference/orbits.md"
API_PAGE = "reference/api.md"


# ---------------------------------------------------------------------------------------------
# MkDocs events
# ---------------------------------------------------------------------------------------------


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace the generated pages' placeholders by their content (at every build)."""
    src = page.file.src_uri
    if src == CLI_PAGE:
        return cli_markdown()
    if src == ORBITS_PAGE:
        return orbits_markdown()
    if src == API_PAGE:
        return api_markdown(markdown)
    return markdown


# ---------------------------------------------------------------------------------------------
# Markdown helpers
# ---------------------------------------------------------------------------------------------

_MD_SPECIAL = re.compile(r"([\\*_\[\]|])")


def cell(text: str) -> str:
    """Plain text as the content of one Markdown table cell (one line, nothing interpreted but
    `code` spans)."""
    text = " ".join(str(text).split())
    return _MD_SPECIAL.sub(r"\\\1", html.escape(text, quote=False))


def prose(text: str) -> str:
    """A help or docstring paragraph as Markdown (its `code` spans kept; HTML escaped)."""
    return html.escape(inspect.cleandoc(text), quote=False)


def code(text: str) -> str:
    """Inline code (also in a table cell: Python-Markdown's tables do not split at a ``|`` inside
    a code span)."""
    text = str(text)
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def slug(text: str) -> str:
    """The anchor Python-Markdown's toc extension gives a heading (its default slugify)."""
    from markdown.extensions.toc import slugify

    return slugify(text, "-")


def xref(title: str, identifier: str) -> str:
    """A cross-reference to an object on the API page that renders as plain code if the object is
    not documented there (an optional autorefs reference)."""
    return (f'<autoref identifier="{html.escape(identifier)}" optional><code>{html.escape(title)}</code>'
            "</autoref>")


def generated_note(source: str) -> str:
    return (f"<!-- generated at build time by docs/hooks.py from {source}; edit the code, not this page -->\n\n")


# ---------------------------------------------------------------------------------------------
# Command-line reference (Typer / Click introspection)
# ---------------------------------------------------------------------------------------------


def _program_name(target: str = "orbitscope.cli:app") -> str:
    """The console script that runs ``target`` (from the installed package's entry points)."""
    from importlib.metadata import entry_points

    for ep in entry_points(group="console_scripts"):
        if ep.value.replace(" ", "") == target:
            return ep.name
    return "orbitscope"


def _walk_commands(cmd: Any, ctx: Any) -> Iterator[tuple[Any, Any]]:
    """``(command, context)`` for ``cmd`` and every visible subcommand below it, depth first, in the
    order the app lists them."""
    yield cmd, ctx
    if hasattr(cmd, "list_commands"):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is None or getattr(sub, "hidden", False):
                continue
            yield from _walk_commands(sub, sub.context_class(sub, info_name=name, parent=ctx))


def _param_type(param: Any, ctx: Any) -> str:
    if getattr(param, "is_flag", False):
        return "flag"
    shown = None
    if hasattr(param, "display_type_rich"):  # Typer >= 0.20 (its own Click)
        shown = param.display_type_rich(ctx)
    elif getattr(param, "type", None) is not None:  # Click
        shown = getattr(param.type, "name", None)
        if shown and param.nargs != 1:
            shown += "..."
    return str(shown or "").strip("<>") or "text"


def _param_default(param: Any) -> str:
    if getattr(param, "required", False):
        return "required"
    show = getattr(param, "show_default", None)
    if isinstance(show, str):
        return cell(show)
    default = param.default
    if callable(default):
        return "(computed)"
    if getattr(param, "is_flag", False):
        secondary = getattr(param, "secondary_opts", None) or []
        if secondary:
            return code(param.opts[-1] if default else secondary[-1])
        return "off" if not default else "on"
    if default is None or default == () or default == []:
        return "–"
    if hasattr(default, "value") and not isinstance(default, (str, int, float)):  # an Enum
        default = default.value
    if isinstance(default, (list, tuple)):
        return ", ".join(code(d) for d in default)
    return code(default)


def _usage(cmd: Any, ctx: Any) -> str:
    pieces = [ctx.command_path]
    params = [p for p in cmd.get_params(ctx) if not getattr(p, "hidden", False)]
    if any(p.param_type_name == "option" for p in params):
        pieces.append("[OPTIONS]")
    for p in params:
        if p.param_type_name == "argument":
            name = (p.metavar or p.name or "").upper() + ("..." if p.nargs != 1 else "")
            pieces.append(name if p.required else f"[{name}]")
    if hasattr(cmd, "list_commands"):
        pieces.append("COMMAND [ARGS]...")
    return " ".join(pieces)


def _help_text(cmd: Any) -> str:
    text = inspect.cleandoc(cmd.help or "")
    text = text.split("\f", 1)[0]  # Click: help after a form feed is not shown
    return "\n".join(line for line in text.splitlines() if line.strip() != "\b")


def _short_help(cmd: Any) -> str:
    if getattr(cmd, "short_help", None):
        return cmd.short_help
    first = " ".join(_help_text(cmd).split("\n\n", 1)[0].split())
    return re.split(r"(?<=[.?!])\s+(?=[A-Z`])", first, maxsplit=1)[0]


def cli_markdown() -> str:
    """The command-line reference page, from the Typer app's Click objects."""
    import typer

    from orbitscope.cli import app

    prog = _program_name()
    root = typer.main.get_command(app)
    root_ctx = root.context_class(root, info_name=prog)
    out = ["# Command line\n", generated_note("the Typer app orbitscope.cli:app")]
    out.append(f"{prose(_help_text(root))}\n")
    out.append("Every command also takes `--help`, which prints the same information.\n")
    commands = list(_walk_commands(root, root_ctx))
    out.append("| Command | What it does |\n| --- | --- |")
    for cmd, ctx in commands[1:]:
        out.append(f"| [`{ctx.command_path}`](#{slug(ctx.command_path)}) | {cell(_short_help(cmd))} |")
    out.append("")
    for cmd, ctx in commands:
        depth = len(ctx.command_path.split()) - 1
        if depth == 0:
            if not [p for p in cmd.get_params(ctx) if p.param_type_name != "option" or p.name != "help"]:
                continue
            out.append(f"## `{ctx.command_path}`\n")
        else:
            out.append(f"{'#' * min(depth + 1, 4)} `{ctx.command_path}`\n")
            if getattr(cmd, "deprecated", False):
                out.append("!!! warning \"Deprecated\"\n    This command is deprecated.\n")
            help_text = _help_text(cmd)
            if help_text:
                out.append(f"{prose(help_text)}\n")
        out.append(f"```text\n{_usage(cmd, ctx)}\n```\n")
        if hasattr(cmd, "list_commands"):
            subs = [(s, c) for s, c in commands if c.parent is ctx]
            out.append("| Subcommand | What it does |\n| --- | --- |")
            for sub, sub_ctx in subs:
                out.append(f"| [`{sub_ctx.command_path}`](#{slug(sub_ctx.command_path)}) | {cell(_short_help(sub))} |")
            out.append("")
        help_option = cmd.get_help_option(ctx)
        params = [p for p in cmd.get_params(ctx) if not getattr(p, "hidden", False) and p is not help_option]
        arguments = [p for p in params if p.param_type_name == "argument"]
        options = [p for p in params if p.param_type_name == "option"]
        if arguments:
            out.append("| Argument | Type | Required | Description |\n| --- | --- | --- | --- |")
            for p in arguments:
                name = (p.metavar or p.name).upper() + ("..." if p.nargs != 1 else "")
                out.append(f"| {code(name)} | {cell(_param_type(p, ctx))} | {'yes' if p.required else 'no'} | "
                           f"{cell(getattr(p, 'help', None) or '')} |")
            out.append("")
        if options:
            out.append("| Option | Type | Default | Description |\n| --- | --- | --- | --- |")
            for p in options:
                names = " / ".join(code(o) for o in [*p.opts, *(getattr(p, "secondary_opts", None) or [])])
                out.append(f"| {names} | {cell(_param_type(p, ctx))} | {_param_default(p)} | {cell(p.help or '')} |")
            out.append("")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------
# Orbit-spec reference (the parser's own tables)
# ---------------------------------------------------------------------------------------------

#: Example values for the placeholders of the parser's help text (START:STOP:STEP come from the
#: parser's own error message for each range name).
PLACEHOLDER_EXAMPLES = {"N": "24", "SEED": "0", "AXIS_STEP": "5", "ANGLE_STEP": "15"}


def parser_names(parse: ModuleType) -> list[str]:
    """The spec names ``parse_orbit`` accepts, read from its code: ``_RANGE_NAMES``, the ``plain``
    table of ``_parse_single`` and the names it adds to ``known``."""
    names = set(parse._RANGE_NAMES)
    tree = ast.parse(inspect.cleandoc("\n" + inspect.getsource(parse._parse_single)))
    found = False
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign):
            continue
        targets = {t.id for t in node.targets if isinstance(t, ast.Name)}
        if "plain" in targets and isinstance(node.value, ast.Dict):
            names.update(k.value for k in node.value.keys if isinstance(k, ast.Constant))
            found = True
        if "known" in targets:
            for sub in ast.walk(node.value):
                if isinstance(sub, ast.Set):
                    names.update(e.value for e in sub.elts if isinstance(e, ast.Constant))
    if not found:
        log.warning("docs/hooks.py: orbitscope.group.parse._parse_single has no 'plain' table any more; "
                    "update parser_names()")
    return sorted(names)


def _split_top(text: str, seps: str) -> list[str]:
    """Split at ``seps`` outside parentheses and outside quotes (quotes count only outside
    parentheses, where the help text quotes its forms)."""
    parts, depth, quoted, start = [], 0, False, 0
    for i, ch in enumerate(text):
        if ch == "(" and not quoted:
            depth += 1
        elif ch == ")" and not quoted:
            depth -= 1
        elif ch == "'" and depth == 0:
            quoted = not quoted
        elif ch in seps and depth == 0 and not quoted:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


_QUOTED_SPEC = re.compile(r"'( x |[^'\s]+)'")


def _quoted_to_code(text: str) -> str:
    return _QUOTED_SPEC.sub(lambda m: code(m.group(1).strip() if m.group(1) == " x " else m.group(1)),
                            html.escape(text, quote=False))


def spec_grammar(parse: ModuleType) -> tuple[list[tuple[list[str], str]], list[str]]:
    """``([(forms, meaning), ...], notes)`` from the parser's help text ``_SPEC_HELP``."""
    body = parse._SPEC_HELP.split(":", 1)[1]
    first, *notes = _split_top(body, ";")
    rows = []
    for entry in _split_top(first, ","):
        depth, forms, meaning, quoted, buf = 0, [], [], False, ""
        for ch in entry:
            if ch == "(":
                depth += 1
                if depth == 1:
                    continue
            elif ch == ")":
                depth -= 1
                if depth == 0:
                    continue
            if depth:
                meaning.append(ch)
            elif ch == "'":
                if quoted:
                    forms.append(buf)
                quoted, buf = not quoted, ""
            elif quoted:
                buf += ch
        rows.append((forms, "".join(meaning).strip()))
    return rows, notes


def _range_example(parse: ModuleType, name: str) -> str | None:
    """The parser's own example for a range name (from the message it gives for a bare name)."""
    try:
        parse.parse_orbit(name)
    except Exception as exc:  # noqa: BLE001 - the message is what we want
        m = re.search(r"e\.g\. '([^']+)'", str(exc))
        return m.group(1) if m else None
    return None


def _example(parse: ModuleType, form: str) -> str:
    name, *args = form.split(":")
    if args and args[0] == "START":
        return _range_example(parse, name) or form
    return ":".join([name, *(PLACEHOLDER_EXAMPLES.get(a, a) for a in args)])


def _short_spec(spec: Any) -> str:
    """A spec as compact JSON with long lists elided (``[0.0, 5.0, …, 360.0]``)."""
    if isinstance(spec, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {_short_spec(v)}" for k, v in spec.items()) + "}"
    if isinstance(spec, (list, tuple)):
        items = [_short_spec(v) for v in spec]
        if len(items) > 4:
            items = [*items[:2], "…", items[-1]]
        return "[" + ", ".join(items) + "]"
    return json.dumps(spec)


def _class_ref(cls: type) -> str:
    return xref(cls.__name__, f"{cls.__module__}.{cls.__qualname__}")


def _summary(obj: Any) -> str:
    """The first paragraph of ``obj``'s docstring, as Markdown for one table cell."""
    doc = inspect.getdoc(obj) or ""
    first = SphinxCompat.convert_roles_plain(" ".join(doc.split("\n\n", 1)[0].split()))
    # a "|" outside code spans would end the cell
    return "".join(part if i % 2 else part.replace("|", "\\|") for i, part in enumerate(re.split(r"(`+[^`]*`+)", first)))


def orbits_markdown() -> str:
    """The orbit-spec reference page, from the parser's tables and the ORBITS registry."""
    from orbitscope.group import ORBITS, parse

    rows, notes = spec_grammar(parse)
    names = parser_names(parse)
    covered: set[str] = set()
    built: dict[str, list[str]] = {}  # orbit kind -> the example specs that build it
    out = ["# Orbit specs\n", generated_note("orbitscope.group.parse and the ORBITS registry")]
    out.append(
        f"An orbit spec names a finite sample of a group on the command line (`--orbit`), in sweep files "
        f"and in Python ({xref('parse_orbit', 'orbitscope.group.parse.parse_orbit')}). Stored runs keep "
        f"the orbit as a JSON spec ({xref('Orbit.spec', 'orbitscope.group.orbits.Orbit.spec')}), which "
        f"{xref('orbit_from_spec', 'orbitscope.group.orbits.orbit_from_spec')} reads back.\n")
    # the parser docstring's rules beyond the list of forms (which the table below shows)
    doc = inspect.getdoc(parse.parse_orbit) or ""
    for para in doc.split("\n\n")[1:]:
        if para.lstrip().startswith(("Raises:", "Returns:", "Args:")):
            break
        sentences = re.split(r"(?<=\.)\s+(?=[A-Z`])", " ".join(para.split()))
        kept = " ".join(s for s in sentences if not s.startswith("Forms:"))
        if kept:
            out.append(f"{SphinxCompat.convert_roles_plain(kept)}\n")
    out.append("## Command-line forms\n")
    out.append("Each row is one form of the parser's help text, with an example that was parsed when "
               "this page was built and what it gives.\n")
    out.append("| Form | Meaning | Example: what it builds |\n| --- | --- | --- |")

    def parsed(form: str, example: str) -> Any:
        try:
            return parse.parse_orbit(example)
        except Exception as exc:  # noqa: BLE001
            log.warning("docs/hooks.py: the orbit form %r (example %r) from the parser's help text does not "
                        "parse: %s", form, example, exc)
            return None

    def example_row(form: str, meaning: str, example: str) -> str:
        orbit = parsed(form, example)
        if orbit is None:
            return f"| {code(form)} | {meaning} | {code(example)}: does not parse |"
        built.setdefault(orbit.kind, []).append(example)
        meaning = meaning or _summary(type(orbit))
        return (f"| {code(form)} | {meaning} | {code(example)}: {_class_ref(type(orbit))}, dims "
                f"{', '.join(code(d) for d in orbit.dims)}, {orbit.size:,} elements |")

    for forms, meaning in rows:
        for form in forms:
            covered.add(form.split(":")[0].lower())
            out.append(example_row(form, _quoted_to_code(meaning), _example(parse, form)))
    for name in names:
        if name not in covered:
            form = f"{name}:START:STOP:STEP" if name in parse._RANGE_NAMES else name
            out.append(example_row(form, "also accepted by the parser (no form of its own in its help text)", _example(parse, form)))
    out.append("")
    for note in notes:  # e.g. "products joined by ' x ', e.g. 'rotation:0:360:30 x scale:0.8:1.2:0.1'"
        quoted = re.findall(r"'([^']+)'", note)
        text = re.sub(r"'([^']+)'", lambda m: f"<code>{html.escape(m.group(1))}</code>", html.escape(note[:1].upper() + note[1:], quote=False).replace("&#x27;", "'"))
        out.append(f"{text}.\n")
        for example in quoted:
            factors = example.split(" x ")
            orbit = parsed(note, example) if len(factors) > 1 and all(f.strip() for f in factors) else None
            if orbit is not None:
                out.append(f"`{example}` builds {_class_ref(type(orbit))} (`{orbit.kind}`) with dims "
                           f"{', '.join(code(d) for d in orbit.dims)} ({orbit.size:,} elements): a product's "
                           f"dims are its factors' dims in order.\n")
    out.append("Names the parser accepts: " + ", ".join(code(n) for n in names) + ".\n")
    out.append("## Registered orbit kinds\n")
    out.append(f"Every orbit class is registered by its `kind` in `ORBITS` (see "
               f"{xref('register_orbit', 'orbitscope.group.orbits.register_orbit')}); these are the kinds "
               f"of JSON specs.\n")
    out.append("| Kind | Class | What it is | From a command-line spec | JSON spec of that example |\n"
               "| --- | --- | --- | --- | --- |")
    for kind, cls in ORBITS.list():
        examples = built.get(kind, [])
        spec = _short_spec(parse.parse_orbit(examples[0]).spec()) if examples else ""
        out.append(f"| `{kind}` | {_class_ref(cls)} | {_summary(cls)} | "
                   f"{', '.join(code(e) for e in examples) or 'Python only'} | {code(spec) if spec else ''} |")
    out.append("")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------
# API page: each object documented once
# ---------------------------------------------------------------------------------------------

_DIRECTIVE = re.compile(r"^::: *([\w.]+) *$")


def _identity(name: str, obj: Any) -> tuple[str, int]:
    return (name if not (inspect.isclass(obj) or inspect.isroutine(obj) or inspect.ismodule(obj)) else "", id(obj))


def _public_names(module: ModuleType) -> list[str]:
    return list(getattr(module, "__all__", []))


def api_markdown(markdown: str) -> str:
    """Expand the page's bare ``::: orbitscope.X`` directives (see the module docstring)."""
    lines = markdown.splitlines()
    directives = []  # (line index, path, has options)
    for i, line in enumerate(lines):
        m = _DIRECTIVE.match(line)
        if m:
            has_options = i + 1 < len(lines) and lines[i + 1].startswith((" ", "\t")) and lines[i + 1].strip()
            directives.append((i, m.group(1), bool(has_options)))
    documented: dict[tuple[str, int], str] = {}  # identity -> anchor of the object on this page
    plans: dict[int, tuple[list[str], list[tuple[str, str]]]] = {}

    def resolve(path: str) -> Any:
        module_path, _, attr = path.rpartition(".")
        try:
            return importlib.import_module(path)
        except ImportError:
            return getattr(importlib.import_module(module_path), attr)

    # explicitly listed objects first: a package section links to them rather than repeating them
    for i, path, _ in directives:
        obj = resolve(path)
        if not inspect.ismodule(obj):
            documented[_identity(path.rsplit(".", 1)[1], obj)] = path
    for n, (i, path, has_options) in enumerate(directives):
        obj = resolve(path)
        if not inspect.ismodule(obj):
            continue
        members, elsewhere = [], []
        for name in _public_names(obj):
            if name not in vars(obj):  # a lazily imported name: its own module has a section
                continue
            key = _identity(name, vars(obj)[name])
            if key in documented and documented[key] != f"{path}.{name}":
                elsewhere.append((name, documented[key]))
            else:
                members.append(name)
                documented.setdefault(key, f"{path}.{name}")
        if not has_options:
            plans[i] = (members, elsewhere) if n > 0 else (members, None)
    out = []
    for i, line in enumerate(lines):
        if i not in plans:
            out.append(line)
            continue
        path = _DIRECTIVE.match(line).group(1)
        members, elsewhere = plans[i]
        if elsewhere is None:  # the first directive: its root heading, and every public name
            out += [line, "    options:", f"      members: {json.dumps(members)}"]
            continue
        out.append(f"## `{path}`\n")
        if elsewhere:
            links = ", ".join(f"[`{name}`][{anchor}]" for name, anchor in elsewhere)
            out.append(f"Also exported here, documented elsewhere on this page: {links}.\n")
        out.append(line)
        out.append("    options:")
        out.append("      show_root_heading: false")
        out.append("      heading_level: 3")
        out.append(f"      members: {json.dumps(members) if members else 'false'}")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------
# Griffe extension: the code base's Sphinx conventions in mkdocstrings
# ---------------------------------------------------------------------------------------------

_ROLE = re.compile(r":(?:py:)?(class|func|meth|mod|data|attr|exc|obj|const):`(!?~?)([^`]+)`")
_EXPLICIT_TITLE = re.compile(r"^(.*?)\s*<([^<>]+)>$")  # :func:`title <target>`


class SphinxCompat(griffe.Extension):
    """Read the code base's Sphinx conventions into mkdocstrings: ``#:`` doc comments above (or
    after) an attribute become its docstring, and cross-reference roles (``:class:`X```,
    ``:func:`~a.b```) become optional links to the object on the API page (plain code where it is
    not documented there). A line ending in ``::`` (a reST literal block) ends in ``:``."""

    def __init__(self) -> None:
        super().__init__()
        self._lines: dict[str, list[str]] = {}

    # --- `#:` comments ---------------------------------------------------------------------
    def _source(self, path: Any) -> list[str]:
        key = str(path)
        if key not in self._lines:
            try:
                with open(key, encoding="utf-8") as fh:
                    self._lines[key] = fh.read().splitlines()
            except OSError:
                self._lines[key] = []
        return self._lines[key]

    def on_attribute_instance(self, *, node: Any, attr: griffe.Attribute, agent: Any, **kwargs: Any) -> None:
        if attr.docstring is None and attr.lineno and isinstance(node, ast.AST):
            self._comment_docstring(attr, agent)

    def on_module_members(self, *, node: Any, mod: griffe.Module, agent: Any, **kwargs: Any) -> None:
        """Module constants assigned together (``ROBUST, NOT_ROBUST, UNDECIDED = 1, -1, 0``), which
        Griffe does not record, become attributes (documented by the ``#:`` comment above them)."""
        if not isinstance(node, ast.Module):
            return
        for stmt in node.body:
            if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Tuple)
                    and isinstance(stmt.value, ast.Tuple) and len(stmt.targets[0].elts) == len(stmt.value.elts)):
                continue
            for target, value in zip(stmt.targets[0].elts, stmt.value.elts):
                if isinstance(target, ast.Name) and target.id not in mod.members:
                    attr = griffe.Attribute(target.id, value=ast.unparse(value), lineno=stmt.lineno,
                                            endlineno=stmt.end_lineno)
                    attr.labels.add("module-attribute")
                    mod.set_member(target.id, attr)
                    self._comment_docstring(attr, agent)

    def _comment_docstring(self, attr: griffe.Attribute, agent: Any) -> None:
        lines = self._source(attr.filepath)
        if not lines or attr.lineno > len(lines):
            return
        comment = []
        i = attr.lineno - 2
        while i >= 0 and lines[i].strip().startswith("#:"):
            comment.insert(0, lines[i].strip()[2:].strip())
            i -= 1
        if not comment:
            end = (attr.endlineno or attr.lineno) - 1
            m = re.search(r"#:\s*(.+)$", lines[end]) if end < len(lines) else None
            if m:
                comment = [m.group(1).strip()]
        if comment:
            attr.docstring = griffe.Docstring("\n".join(comment), lineno=attr.lineno, endlineno=attr.lineno,
                                              parent=attr, parser=agent.docstring_parser,
                                              parser_options=agent.docstring_options)

    # --- roles -------------------------------------------------------------------------------
    @staticmethod
    def convert_roles_plain(text: str) -> str:
        """Roles as plain code (for text used outside docstrings)."""
        return _ROLE.sub(lambda m: code(SphinxCompat._title_target(m)[0]), text)

    @staticmethod
    def _title_target(m: re.Match) -> tuple[str, str]:
        """``(title, target)`` of a role as Sphinx shows and resolves it."""
        text = m.group(3).strip()
        explicit = _EXPLICIT_TITLE.match(text)
        if explicit:
            return explicit.group(1), explicit.group(2).strip()
        target = text[:-2] if text.endswith("()") else text
        return (target.lstrip(".").rsplit(".", 1)[-1] if "~" in m.group(2) else target.lstrip(".")), target

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        for obj in self._objects(pkg):
            if obj.docstring is not None and obj.docstring.value:
                obj.docstring.value = self._convert(obj, obj.docstring.value, loader)

    def _objects(self, obj: griffe.Object) -> Iterator[griffe.Object]:
        yield obj
        for member in obj.members.values():
            if not member.is_alias:
                yield from self._objects(member)

    @staticmethod
    def _lookup(scope: Any, path: str) -> Any:
        try:
            return scope[path]
        except Exception:  # noqa: BLE001 - KeyError, alias resolution errors: not found
            return None

    def _resolve(self, obj: griffe.Object, target: str, loader: griffe.GriffeLoader, role: str = "obj") -> str | None:
        """The documented path of ``target`` as Python would find it from ``obj``'s scope."""
        found = None
        module = obj if obj.is_module else obj.module
        if target.startswith("."):
            rel = target.lstrip(".")
            scope: Any = module
            while scope is not None and found is None:
                found = self._lookup(scope, rel)
                scope = scope.parent
        else:
            found = self._lookup(loader.modules_collection, target)
            scope = obj
            while scope is not None and found is None:
                if not scope.is_function:
                    found = self._lookup(scope, target)
                scope = scope.parent
        if found is None:
            return None
        last = target.rsplit(".", 1)[-1]
        if role != "mod" and found.is_module and last in found.members:
            # `from .certify import certify`: the package's name is the function, which Griffe
            # shadows with the submodule of the same name
            found = found.members[last]
        try:
            return found.final_target.path if found.is_alias else found.path
        except Exception:  # noqa: BLE001 - an alias to something not loaded
            return found.target_path if found.is_alias else None

    def _convert(self, obj: griffe.Object, text: str, loader: griffe.GriffeLoader) -> str:
        def role(m: re.Match) -> str:
            title, target = self._title_target(m)
            identifier = None if "!" in m.group(2) else self._resolve(obj, target, loader, m.group(1))
            if identifier is None and target.startswith("orbitscope."):
                identifier = target
            return xref(title, identifier) if identifier else code(title)

        text = _ROLE.sub(role, text)
        return re.sub(r"(?m)(\S)::$", r"\1:", text)
