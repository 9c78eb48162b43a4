# Appended to the conf.py that `antsibull-docs sphinx-init` writes (scripts/docs.sh). This machine reaches no
# intersphinx inventory (docs.ansible.com, docs.python.org), so the site is built without them: a reference
# to Ansible's own docs (ansible.builtin's plugins, common_return_values) renders as its text, unlinked, while
# a reference inside this collection that does not resolve still fails the build (-W, nitpicky).
intersphinx_mapping = {}


def _unlinked_outside_collection(app, env, node, contnode):
    target = node.get("reftarget", "")
    if node.get("refdomain") == "std" and not target.startswith("ansible_collections.ebpf.xdp."):
        return contnode
    return None


def setup(app):
    app.connect("missing-reference", _unlinked_outside_collection)
