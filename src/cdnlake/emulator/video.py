"""Video libraries: videos, collections, resolutions, oEmbed."""

from __future__ import annotations

import random
import re
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

from cdnlake.emulator.area import (
    INT32_MAX,
    AreaBase,
    RouteSpec,
    generic,
    generic_auth,
    iso,
    sometimes_null,
    status_only,
)
from cdnlake.emulator.http import Request, Response, json_response


class VideoRoutes(AreaBase):
    ROUTES: ClassVar[list[RouteSpec]] = [
        ("GET", r"^/library/(\d+)/videos$", "videos", generic_auth),
        ("GET", r"^/library/(\d+)/collections$", "collections", generic_auth),
        ("GET", r"^/library/(\d+)/videos/([^/]+)/resolutions$", "resolutions", generic_auth),
        ("GET", r"^/OEmbed$", "oembed", status_only),
    ]

    def _paging(self, req: Request) -> tuple[int, int] | Response:
        try:
            page = int(req.arg("page") or 1)
            per = int(req.arg("itemsPerPage") or 100)
        except ValueError:
            return generic(400, "paging.invalid", "page and itemsPerPage must be integers")
        if not 1 <= page <= INT32_MAX or not 1 <= per <= 1000:
            return generic(400, "paging.invalid", "page >= 1 and itemsPerPage 1..1000")
        return page, per

    def _video(self, library: int, i: int) -> dict[str, Any]:
        rng = random.Random(f"video:{library}:{i}")
        guid = f"{rng.getrandbits(128):032x}"
        guid = f"{guid[:8]}-{guid[8:12]}-{guid[12:16]}-{guid[16:20]}-{guid[20:]}"
        uploaded = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(hours=rng.randrange(7000))
        return {
            "videoLibraryId": library,
            "guid": guid,
            "title": f"Video {i + 1}",
            # Sometimes without an offset, as the provider's documents allow (it means UTC).
            "dateUploaded": iso(uploaded) if i % 2 else uploaded.strftime("%Y-%m-%dT%H:%M:%S"),
            "views": rng.randint(0, 50000),
            "isPublic": True,
            "length": rng.randint(10, 3600),
            "status": 4,
            "framerate": 29.97,
            "width": 1920,
            "height": 1080,
            "outputCodecs": "x264",
            "thumbnailCount": 12,
            "encodeProgress": 100,
            "storageSize": rng.randint(10**6, 10**9),
            "hasMP4Fallback": True,
            "averageWatchTime": rng.randint(5, 600),
            "totalWatchTime": rng.randint(100, 10**6),
            "description": "",
            "rotation": 0,
            "availableResolutions": "360p,720p,1080p",
            "captions": sometimes_null(
                f"captions:{library}:{i}", [{"srclang": "en", "label": "English", "version": 1}]
            ),
            "collectionId": "",
            "thumbnailFileName": "thumbnail.jpg",
            "thumbnailUrl": f"https://vz-{library}.example-cdn.net/{guid}/thumbnail.jpg",
            "thumbnailBlurhash": "LEHV6nWB2yk8pyo0adR*.7kCMdnj",
            "category": "other",
            "chapters": sometimes_null(
                f"chapters:{library}:{i}", [{"title": "Intro", "start": 0, "end": 10}]
            ),
            "moments": sometimes_null(
                f"moments:{library}:{i}", [{"label": "Highlight", "timestamp": 5}]
            ),
            "metaTags": sometimes_null(
                f"metaTags:{library}:{i}", [{"property": "description", "value": "demo"}]
            ),
            "transcodingMessages": sometimes_null(f"transcodingMessages:{library}:{i}", []),
            "jitEncodingEnabled": False,
            "smartGenerateStatus": 0,
            "smartGenerateFeaturesStatus": {
                "title": 0,
                "description": 0,
                "chapters": 0,
                "moments": 0,
            },
            "hasOriginal": True,
            "originalHash": f"{rng.getrandbits(64):016x}",
            "hasHighQualityPreview": False,
        }

    def _page(self, req: Request, items: list[dict[str, Any]]) -> Response:
        paging = self._paging(req)
        if isinstance(paging, Response):
            return paging
        page, per = paging
        chunk = items[(page - 1) * per : page * per]
        return json_response(
            200,
            {
                "totalItems": len(items),
                "currentPage": page,
                "itemsPerPage": per,
                "items": chunk or None,  # an empty page's items are null at times
            },
        )

    def videos(self, req: Request, m: re.Match[str]) -> Response:
        library = int(m.group(1))
        if library not in self.fx.libraries:
            return generic(404, "library.not_found", f"video library {library} does not exist")
        items = [self._video(library, i) for i in range(self.fx.videos_per_library)]
        search = (req.arg("search") or "").lower()
        if search:
            items = [v for v in items if search in v["title"].lower()]
        return self._page(req, items)

    def collections(self, req: Request, m: re.Match[str]) -> Response:
        library = int(m.group(1))
        if library not in self.fx.libraries:
            return generic(404, "library.not_found", f"video library {library} does not exist")
        items = [
            {
                "videoLibraryId": library,
                "guid": f"c0{library}-{i:04d}",
                "name": f"Collection {i + 1}",
                "videoCount": 3,
                "totalSize": 3_000_000 * (i + 1),
                "previewVideoIds": "",
                "previewImageUrls": sometimes_null(f"previews:{library}:{i}", []),
            }
            for i in range(self.fx.collections_per_library)
        ]
        return self._page(req, items)

    def resolutions(self, req: Request, m: re.Match[str]) -> Response:
        library, video_id = int(m.group(1)), m.group(2)
        videos = [self._video(library, i) for i in range(self.fx.videos_per_library)]
        if library not in self.fx.libraries or video_id not in {v["guid"] for v in videos}:
            return generic(404, "video.not_found", f"video {video_id} does not exist")
        res = ["360p", "720p", "1080p"]
        return json_response(
            200,
            {
                "success": True,
                "message": "OK",
                "statusCode": 200,
                "data": {
                    "videoId": video_id,
                    "videoLibraryId": library,
                    "availableResolutions": sometimes_null(f"availableResolutions:{video_id}", res),
                    "configuredResolutions": sometimes_null(
                        f"configuredResolutions:{video_id}", res
                    ),
                    "playlistResolutions": [
                        {"resolution": r, "path": f"{r}/video.m3u8"} for r in res
                    ],
                    "storageResolutions": [{"resolution": r, "path": f"{r}/"} for r in res],
                    "mp4Resolutions": [{"resolution": "720p", "path": "play_720p.mp4"}],
                    "storageObjects": sometimes_null(f"storageObjects:{video_id}", []),
                    "oldResolutions": sometimes_null(f"oldResolutions:{video_id}", []),
                    "hasBothOldAndNewResolutionFormat": False,
                    "hasOriginal": True,
                },
            },
        )

    def oembed(self, req: Request, m: re.Match[str]) -> Response:
        url = req.arg("url")
        if not url:
            return status_only(400)
        width = int(req.arg("maxWidth") or 640)
        height = int(req.arg("maxHeight") or 360)
        return json_response(
            200,
            {
                "version": "1.0",
                "title": "Video",
                "type": "video",
                "thumbnail_url": "https://vz.example-cdn.net/thumbnail.jpg",
                "thumbnail_width": 1280,
                "thumbnail_height": 720,
                "html": f'<iframe src="{url}" width="{width}" height="{height}"></iframe>',
                "width": width,
                "height": height,
                "provider_name": "Example CDN Stream",
                "provider_url": "https://example-cdn.net",
            },
        )
