# Builds the toolgate manager image: a static binary on an empty base, run as
# a non-root user. hack/ assembles an equivalent image without a Docker
# engine (see docs/images.md once the cluster scripts exist).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY cmd/ cmd/
COPY internal/ internal/
ARG TARGETOS=linux
ARG TARGETARCH=amd64
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags="-s -w" -o /out/manager ./cmd/manager

FROM scratch
COPY --from=build /out/manager /manager
# 65532 is the conventional "nonroot" user of distroless images.
USER 65532:65532
ENTRYPOINT ["/manager"]
