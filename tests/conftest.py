"""Shared by unit and integration tests: make the collection importable.

Plugins (not module_utils) import through Ansible's collection loader, as
they do under ansible-test, so install it for plain pytest too.
"""

import os

from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(ROOT, ".build", "collections")
_AnsibleCollectionFinder(paths=[COLLECTIONS])._install()
