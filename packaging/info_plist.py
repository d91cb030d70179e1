"""The macOS app's Info.plist (PyInstaller's BUNDLE step in specdesk.spec).

It declares GGUF as a document type SpecDesk opens, so the Finder offers "Open With →
SpecDesk" for a .gguf file, opens one with it on a double-click when no other app
claims the type, and takes files dropped on its Dock icon. The Finder hands such a file
to the app as a QFileOpenEvent (``specdesk.ui.app.Application``), at launch or while it
runs. GGUF has no system type, so it is declared here as an imported one (SpecDesk does
not own the format): the UTI below, conforming to public.data, for the .gguf extension
and the MIME type application/x-gguf (the same as packaging/specdesk-gguf.xml).
"""

from __future__ import annotations

GGUF_UTI = "io.github.specdesk.gguf"
GGUF_MIME = "application/x-gguf"


def info_plist(name: str, version: str) -> dict:
    return {
        "CFBundleName": name,
        "CFBundleDisplayName": name,
        "CFBundleShortVersionString": version,
        "CFBundleVersion": version,
        "NSHighResolutionCapable": True,
        "LSMinimumSystemVersion": "11.0",
        "CFBundleDocumentTypes": [{
            "CFBundleTypeName": "GGUF model",
            "CFBundleTypeRole": "Viewer",  # it opens models; it does not write them
            "LSHandlerRank": "Default",
            "LSItemContentTypes": [GGUF_UTI],
        }],
        "UTImportedTypeDeclarations": [{
            "UTTypeIdentifier": GGUF_UTI,
            "UTTypeDescription": "GGUF model",
            "UTTypeConformsTo": ["public.data"],
            "UTTypeTagSpecification": {
                "public.filename-extension": ["gguf"],
                "public.mime-type": [GGUF_MIME],
            },
        }],
    }
