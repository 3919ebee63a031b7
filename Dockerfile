# coffer's container image: the static binary on a distroless base, run as
# a user without privileges (docs/operations.md, Container image).
#   docker build -t coffer .
# Build: the module's dependencies first, so that a change of the code
# alone reuses their layer.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# CGO_ENABLED=0: a static binary, which needs no libc in the image.
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags='-s -w' -o /out/coffer ./cmd/coffer

# distroless/static: CA certificates and time zones, no shell, no package
# manager; its nonroot user is 65532.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/coffer /usr/local/bin/coffer
COPY deploy/coffer.yaml /etc/coffer/coffer.yaml
USER 65532:65532
# HTTP/JSON, gRPC, operations (/metrics: keep it private).
EXPOSE 8080 9090 8081
ENTRYPOINT ["/usr/local/bin/coffer"]
CMD ["serve", "-c", "/etc/coffer/coffer.yaml"]
