"""tools/check-imports.py on small made-up crates: it exits 0 on a clean
crate and 1 on a circle, an upward import or an unranked module."""

import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "check-imports.py")


def run(files):
    """Writes `files` (path under src/ -> text) as a crate named kvtier
    and returns the script's (exit status, output)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "kvtier", "src")
        for path, text in files.items():
            full = os.path.join(src, path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w", encoding="utf-8") as f:
                f.write(text)
        p = subprocess.run([sys.executable, SCRIPT, "--src", src],
                           capture_output=True, text=True, check=False)
        return p.returncode, p.stdout + p.stderr


LIB = "pub mod error;\npub mod primary;\npub mod tiering;\n"


class CheckImports(unittest.TestCase):
    def test_downward_imports_pass(self):
        rc, out = run({
            "lib.rs": LIB,
            "error.rs": "pub struct Error;\n",
            "primary.rs": "use crate::error::Error;\npub struct Primary(Error);\n",
            "tiering.rs": "use crate::primary::Primary;\npub struct Manager(Primary);\n",
        })
        self.assertEqual(rc, 0, out)
        self.assertIn("upward imports: 0", out)

    def test_upward_import_fails(self):
        rc, out = run({
            "lib.rs": LIB,
            "error.rs": "pub struct Error;\n",
            "primary.rs": "use crate::tiering::Manager;\npub struct Primary;\n",
            "tiering.rs": "pub struct Manager;\n",
        })
        self.assertEqual(rc, 1, out)
        self.assertIn("crate::primary -> crate::tiering", out)

    def test_upward_import_in_test_code_passes(self):
        rc, out = run({
            "lib.rs": LIB,
            "error.rs": "pub struct Error;\n",
            "primary.rs": "pub struct Primary;\n#[cfg(test)]\nmod tests {\n"
                          "    use crate::tiering::Manager;\n}\n",
            "tiering.rs": "pub struct Manager;\n",
        })
        self.assertEqual(rc, 0, out)

    def test_circle_within_a_layer_fails(self):
        rc, out = run({
            "lib.rs": "pub mod key;\npub mod request;\n",
            "key.rs": "use crate::request::Request;\npub struct Key;\n",
            "request.rs": "use crate::key::Key;\npub struct Request;\n",
        })
        self.assertEqual(rc, 1, out)
        self.assertIn("circles: 1", out)

    def test_a_module_file_named_by_a_path_attribute_is_read(self):
        # `key.rs` names its child's file with `#[path]`; the child imports
        # `request`, which imports `key`: a circle only seen by reading it.
        rc, out = run({
            "lib.rs": "pub mod key;\npub mod request;\n",
            "key.rs": '#[path = "key_parts.rs"]\nmod parts;\nuse parts::Part;\npub struct Key(Part);\n',
            "key_parts.rs": "use crate::request::Request;\npub struct Part(Request);\n",
            "request.rs": "use crate::key::Key;\npub struct Request;\n",
        })
        self.assertEqual(rc, 1, out)
        self.assertIn("circles: 1", out)

    def test_unranked_module_fails(self):
        rc, out = run({
            "lib.rs": "pub mod error;\npub mod newcomer;\n",
            "error.rs": "pub struct Error;\n",
            "newcomer.rs": "pub struct New;\n",
        })
        self.assertEqual(rc, 1, out)
        self.assertIn("newcomer", out)


if __name__ == "__main__":
    unittest.main()
