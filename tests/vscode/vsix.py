"""Pack an extension folder into a `.vsix`, the zip `code-server --install-extension` takes.

A VSIX is an Open Packaging Convention zip: `[Content_Types].xml` naming the content type of
each file extension, `extension.vsixmanifest` giving the extension's identity, and the
extension's own files under `extension/`. Packing by hand keeps the harness's own fixture free
of a `vsce` install; an extension with dependencies or a build step is packed by `vsce package`
and its `.vsix` handed to the harness instead.
"""

import json
import zipfile
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape, quoteattr

_CONTENT_TYPES = {
    ".json": "application/json",
    ".js": "application/javascript",
    ".vsixmanifest": "text/xml",
    ".md": "text/markdown",
    ".html": "text/html",
    ".css": "text/css",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}


def extension_id(source: Path) -> str:
    """`publisher.name` of the extension whose `package.json` is in `source`, as VS Code
    names it (lower case)."""
    manifest = json.loads((source / "package.json").read_text())
    return f"{manifest['publisher']}.{manifest['name']}".lower()


def pack_vsix(source: Path, out: Path) -> Path:
    """Write the extension in the folder `source` (its `package.json` at the top) to the
    `.vsix` file `out` and return `out`. Every file under `source` goes in; a file whose
    suffix has no known content type raises ValueError, since VS Code refuses such a package
    only when it installs it."""
    manifest = json.loads((source / "package.json").read_text())
    files = sorted(p for p in source.rglob("*") if p.is_file())
    suffixes = {".vsixmanifest"} | {p.suffix for p in files}
    unknown = sorted(s for s in suffixes if s not in _CONTENT_TYPES)
    if unknown:
        raise ValueError(f"no content type for {', '.join(unknown) or 'files without a suffix'}")
    types = "".join(
        f'<Default Extension="{s}" ContentType="{_CONTENT_TYPES[s]}"/>' for s in sorted(suffixes)
    )
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as vsix:
        vsix.writestr(
            "[Content_Types].xml",
            '<?xml version="1.0" encoding="utf-8"?>'
            '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
            f"{types}</Types>",
        )
        vsix.writestr("extension.vsixmanifest", _vsixmanifest(manifest))
        for path in files:
            vsix.write(path, "extension/" + path.relative_to(source).as_posix())
    return out


def _vsixmanifest(manifest: dict[str, Any]) -> str:
    engine = manifest.get("engines", {}).get("vscode", "*")
    return (
        '<?xml version="1.0" encoding="utf-8"?>'
        '<PackageManifest Version="2.0.0"'
        ' xmlns="http://schemas.microsoft.com/developer/vsx-schema/2011"'
        ' xmlns:d="http://schemas.microsoft.com/developer/vsx-schema-design/2011">'
        "<Metadata>"
        f'<Identity Language="en-US" Id={quoteattr(str(manifest["name"]))}'
        f" Version={quoteattr(str(manifest['version']))}"
        f" Publisher={quoteattr(str(manifest['publisher']))}/>"
        f"<DisplayName>{escape(str(manifest.get('displayName', manifest['name'])))}</DisplayName>"
        f'<Description xml:space="preserve">{escape(str(manifest.get("description", "")))}'
        "</Description>"
        "<Properties>"
        f'<Property Id="Microsoft.VisualStudio.Code.Engine" Value={quoteattr(str(engine))}/>'
        "</Properties>"
        "</Metadata>"
        '<Installation><InstallationTarget Id="Microsoft.VisualStudio.Code"/></Installation>'
        "<Dependencies/>"
        "<Assets>"
        '<Asset Type="Microsoft.VisualStudio.Code.Manifest" Path="extension/package.json"'
        ' Addressable="true"/>'
        "</Assets>"
        "</PackageManifest>"
    )
