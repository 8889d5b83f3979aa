"""Video library: videos, collections, resolutions and oEmbed (``video_url``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

from cdnlake.client.area import INT32_MAX, Area, Model, check_id, check_range
from cdnlake.client.error_bodies import generic_result
from cdnlake.errors import RequestValidationError

DEFAULT_ITEMS_PER_PAGE = 100
MAX_ITEMS_PER_PAGE = 1000


class Caption(Model):
    srclang: str | None = None
    label: str | None = None
    version: int | None = None


class Chapter(Model):
    title: str | None = None
    start: int | None = None
    end: int | None = None


class Moment(Model):
    label: str | None = None
    timestamp: int | None = None


class MetaTag(Model):
    property: str | None = None
    value: str | None = None


class TranscodingMessage(Model):
    timeStamp: datetime | None = None
    level: int | None = None
    issueCode: int | None = None
    message: str | None = None
    value: str | None = None


class SmartGenerateFeaturesStatus(Model):
    title: int | None = None
    description: int | None = None
    chapters: int | None = None
    moments: int | None = None


class Video(Model):
    videoLibraryId: int | None = None
    guid: str | None = None
    title: str | None = None
    dateUploaded: datetime | None = None
    views: int | None = None
    isPublic: bool | None = None
    length: int | None = None
    status: int | None = None
    framerate: float | None = None
    width: int | None = None
    height: int | None = None
    outputCodecs: str | None = None
    thumbnailCount: int | None = None
    encodeProgress: int | None = None
    storageSize: int | None = None
    hasMP4Fallback: bool | None = None
    averageWatchTime: int | None = None
    totalWatchTime: int | None = None
    description: str | None = None
    rotation: int | None = None
    availableResolutions: str | None = None
    captions: list[Caption] | None = None
    collectionId: str | None = None
    thumbnailFileName: str | None = None
    thumbnailUrl: str | None = None
    thumbnailBlurhash: str | None = None
    category: str | None = None
    chapters: list[Chapter] | None = None
    moments: list[Moment] | None = None
    metaTags: list[MetaTag] | None = None
    transcodingMessages: list[TranscodingMessage] | None = None
    jitEncodingEnabled: bool | None = None
    smartGenerateStatus: int | None = None
    smartGenerateFeaturesStatus: SmartGenerateFeaturesStatus | None = None
    hasOriginal: bool | None = None
    originalHash: str | None = None
    hasHighQualityPreview: bool | None = None


class Collection(Model):
    videoLibraryId: int | None = None
    guid: str | None = None
    name: str | None = None
    videoCount: int | None = None
    totalSize: int | None = None
    previewVideoIds: str | None = None
    previewImageUrls: list[str] | None = None


class VideoPage(Model):
    totalItems: int = 0
    currentPage: int = 1
    itemsPerPage: int = DEFAULT_ITEMS_PER_PAGE
    items: list[Video] | None = None


class CollectionPage(Model):
    totalItems: int = 0
    currentPage: int = 1
    itemsPerPage: int = DEFAULT_ITEMS_PER_PAGE
    items: list[Collection] | None = None


class ResolutionPath(Model):
    resolution: str | None = None
    path: str | None = None


class StorageObject(Model):
    guid: str | None = None
    storageZoneName: str | None = None
    path: str | None = None
    objectName: str | None = None
    length: int | None = None
    lastChanged: datetime | None = None
    serverId: int | None = None
    isDirectory: bool | None = None
    userId: str | None = None
    contentType: str | None = None
    dateCreated: datetime | None = None
    storageZoneId: int | None = None
    checksum: str | None = None
    replicatedZones: str | None = None


class ResolutionsData(Model):
    videoId: str | None = None
    videoLibraryId: int | None = None
    availableResolutions: list[str] | None = None
    configuredResolutions: list[str] | None = None
    playlistResolutions: list[ResolutionPath] | None = None
    storageResolutions: list[ResolutionPath] | None = None
    mp4Resolutions: list[ResolutionPath] | None = None
    storageObjects: list[StorageObject] | None = None
    oldResolutions: list[StorageObject] | None = None
    hasBothOldAndNewResolutionFormat: bool | None = None
    hasOriginal: bool | None = None


class VideoResolutions(Model):
    success: bool = False
    message: str | None = None
    statusCode: int | None = None
    data: ResolutionsData | None = None


class Oembed(Model):
    version: str | None = None
    title: str | None = None
    type: str | None = None
    thumbnail_url: str | None = None
    thumbnail_width: int | None = None
    thumbnail_height: int | None = None
    html: str | None = None
    width: int | None = None
    height: int | None = None
    provider_name: str | None = None
    provider_url: str | None = None


def _paging(page: int, items_per_page: int) -> dict[str, Any]:
    check_range("page", page, 1, INT32_MAX)
    check_range("itemsPerPage", items_per_page, 1, MAX_ITEMS_PER_PAGE)
    return {"page": page, "itemsPerPage": items_per_page}


def pages_needed(total: int, per_page: int) -> int:
    return max(1, -(-total // per_page))


def _walk(fetch: Callable[[int], VideoPage | CollectionPage]) -> Iterator[Any]:
    """Items of page 1, 2, ... until the envelope's ``totalItems`` are covered."""
    page = 1
    while True:
        result = fetch(page)
        items = result.items or []
        yield from items
        if page >= pages_needed(result.totalItems, result.itemsPerPage) or not items:
            return
        page += 1


class VideoApi(Area):
    base_attr = "video_url"

    def list_videos(
        self,
        library_id: int,
        page: int = 1,
        items_per_page: int = DEFAULT_ITEMS_PER_PAGE,
        search: str | None = None,
        collection: str | None = None,
    ) -> VideoPage:
        check_id("libraryId", library_id)
        params = {**_paging(page, items_per_page), "search": search, "collection": collection}
        return self._call(
            "GET", f"/library/{library_id}/videos", VideoPage, parser=generic_result, params=params
        )

    def list_collections(
        self, library_id: int, page: int = 1, items_per_page: int = DEFAULT_ITEMS_PER_PAGE
    ) -> CollectionPage:
        check_id("libraryId", library_id)
        return self._call(
            "GET",
            f"/library/{library_id}/collections",
            CollectionPage,
            parser=generic_result,
            params=_paging(page, items_per_page),
        )

    def iter_videos(
        self, library_id: int, items_per_page: int = DEFAULT_ITEMS_PER_PAGE
    ) -> Iterator[Video]:
        """Every video, walking pages until ``totalItems`` are seen."""
        return _walk(lambda page: self.list_videos(library_id, page, items_per_page))

    def iter_collections(
        self, library_id: int, items_per_page: int = DEFAULT_ITEMS_PER_PAGE
    ) -> Iterator[Collection]:
        """Every collection, walking pages until ``totalItems`` are seen."""
        return _walk(lambda page: self.list_collections(library_id, page, items_per_page))

    def video_resolutions(self, library_id: int, video_id: str) -> VideoResolutions:
        check_id("libraryId", library_id)
        if not video_id or "/" in video_id:
            raise RequestValidationError("videoId", "must be a video guid")
        return self._call(
            "GET",
            f"/library/{library_id}/videos/{video_id}/resolutions",
            VideoResolutions,
            parser=generic_result,
        )

    def oembed(
        self, url: str, max_width: int | None = None, max_height: int | None = None
    ) -> Oembed:
        """oEmbed data for a video URL; the seed lists no credentials for it."""
        if not url:
            raise RequestValidationError("url", "must not be empty")
        params = {"url": url, "maxWidth": max_width, "maxHeight": max_height}
        return self._call(
            "GET", "/OEmbed", Oembed, parser=generic_result, params=params, auth="none"
        )
