// Package objstore talks to an S3-compatible object store (AWS S3, MinIO,
// versitygw, Ceph RGW, …) for the daemon: the snapshot store that keeps
// snapshots in a bucket (internal/snapshot/s3store) and the export of a
// sandbox's files (the supervisor's Export).
//
// It wraps aws-sdk-go-v2 (docs/decisions.md) with what both need: a client
// made from the daemon's config (credentials from the config file or the
// daemon's environment, never from a sandbox), uploads of streams of
// unknown length in bounded memory (one part at a time), and errors that
// say what to do.
package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Config names a store and how to reach it.
type Config struct {
	// Endpoint is the store's URL ("http://127.0.0.1:7070",
	// "https://s3.eu-west-1.amazonaws.com"). Empty: AWS S3 of Region.
	Endpoint string `toml:"endpoint"`
	// Region is the store's region; empty means "us-east-1".
	Region string `toml:"region"`
	// AccessKeyID and SecretAccessKey are the credentials. When both are
	// empty they come from the daemon's environment: AWS_ACCESS_KEY_ID and
	// AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN).
	AccessKeyID     string `toml:"access_key_id"`
	SecretAccessKey Secret `toml:"secret_access_key"`
	// VirtualHosted addresses buckets as BUCKET.endpoint instead of
	// endpoint/BUCKET (path style, which every S3-compatible server
	// understands, is the default).
	VirtualHosted bool `toml:"virtual_hosted"`
}

// Secret is a credential: logs and fmt print it redacted.
type Secret string

// String returns "REDACTED".
func (Secret) String() string { return "REDACTED" }

// LogValue keeps it out of slog's output.
func (Secret) LogValue() slog.Value { return slog.StringValue("REDACTED") }

// Defaults.
const (
	DefaultRegion = "us-east-1"
	// PartSize is the size of the parts of an upload of unknown length,
	// and the most memory one upload holds.
	PartSize = 8 << 20
	// maxParts is S3's limit on the parts of one upload.
	maxParts = 10000
)

// Client is a store's client.
type Client struct {
	s3       *s3.Client
	presign  *s3.PresignClient
	endpoint string
}

// New makes a client from c. It does not talk to the store.
func New(c Config) (*Client, error) {
	if c.Region == "" {
		c.Region = DefaultRegion
	}
	key, secret, token := c.AccessKeyID, string(c.SecretAccessKey), ""
	if key == "" && secret == "" {
		key, secret, token = os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY"), os.Getenv("AWS_SESSION_TOKEN")
	}
	if key == "" || secret == "" {
		return nil, errors.New("object store: no credentials: set access_key_id and secret_access_key in the config file, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the daemon's environment")
	}
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("object store: endpoint %q: use a URL like http://127.0.0.1:7070 or https://s3.example.com", c.Endpoint)
		}
	}
	opts := s3.Options{
		Region:       c.Region,
		Credentials:  credentials.NewStaticCredentialsProvider(key, secret, token),
		UsePathStyle: !c.VirtualHosted,
		// Servers other than AWS's do not all take the SDK's default
		// checksums; the content's integrity is checked with Content-MD5
		// where it matters, and by digest above this package.
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
		RetryMaxAttempts:           3,
		HTTPClient: &http.Client{Transport: &http.Transport{
			Proxy:                 nil, // the store is reached directly, never through a sandbox's egress
			DialContext:           (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
			TLSHandshakeTimeout:   10 * time.Second,
			ResponseHeaderTimeout: 2 * time.Minute,
			MaxIdleConnsPerHost:   16,
			IdleConnTimeout:       90 * time.Second,
		}},
	}
	if c.Endpoint != "" {
		opts.BaseEndpoint = aws.String(strings.TrimRight(c.Endpoint, "/"))
	}
	cl := s3.New(opts)
	return &Client{s3: cl, presign: s3.NewPresignClient(cl), endpoint: c.Endpoint}, nil
}

// S3 is the SDK's client, for what this package does not wrap.
func (c *Client) S3() *s3.Client { return c.s3 }

var bucketPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

// CheckBucket checks a bucket's name (S3's rules: 3 to 63 lower-case
// letters, digits, '.' and '-').
func CheckBucket(b string) error {
	if !bucketPattern.MatchString(b) || strings.Contains(b, "..") {
		return fmt.Errorf("%w: bucket %q: use 3 to 63 lower-case letters, digits, '.' and '-', starting and ending with a letter or digit", sandbox.ErrInvalid, b)
	}
	return nil
}

// Head returns an object's size and whether it exists.
func (c *Client) Head(ctx context.Context, bucket, key string) (size int64, lastModified time.Time, ok bool, err error) {
	out, err := c.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		if IsNotFound(err) {
			return 0, time.Time{}, false, nil
		}
		return 0, time.Time{}, false, c.Wrap("look up s3://"+bucket+"/"+key, err)
	}
	return aws.ToInt64(out.ContentLength), aws.ToTime(out.LastModified), true, nil
}

// Stat returns what a HEAD of an object says: its size, ETag and
// metadata (keys in lower case, without x-amz-meta-); ok is false when
// there is none.
func (c *Client) Stat(ctx context.Context, bucket, key string) (info ObjectInfo, ok bool, err error) {
	out, err := c.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		if IsNotFound(err) {
			return ObjectInfo{}, false, nil
		}
		return ObjectInfo{}, false, c.Wrap("look up s3://"+bucket+"/"+key, err)
	}
	meta := make(map[string]string, len(out.Metadata))
	for k, v := range out.Metadata {
		meta[strings.ToLower(k)] = v
	}
	return ObjectInfo{Size: aws.ToInt64(out.ContentLength), ETag: aws.ToString(out.ETag), Metadata: meta}, true, nil
}

// ObjectInfo is what Stat returns.
type ObjectInfo struct {
	Size     int64
	ETag     string
	Metadata map[string]string
}

// ErrChanged is what Put returns when the store refused its condition
// (Upload.IfAbsent, Upload.IfMatch): 412, the object is not what was
// expected.
var ErrChanged = errors.New("the object changed")

// PutBytes stores b as an object.
func (c *Client) PutBytes(ctx context.Context, bucket, key string, b []byte, contentType string, meta map[string]string) error {
	return c.putBytes(ctx, Upload{Bucket: bucket, Key: key, ContentType: contentType, Metadata: meta}, b)
}

func (c *Client) putBytes(ctx context.Context, u Upload, b []byte) error {
	in := &s3.PutObjectInput{Bucket: &u.Bucket, Key: &u.Key, Body: bytes.NewReader(b), ContentLength: aws.Int64(int64(len(b))), Metadata: u.Metadata}
	if u.ContentType != "" {
		in.ContentType = &u.ContentType
	}
	in.IfNoneMatch, in.IfMatch = u.conditions()
	_, err := c.s3.PutObject(ctx, in)
	if err != nil && notImplemented(err) && (in.IfNoneMatch != nil || in.IfMatch != nil) {
		// A store without conditional writes: the caller's own check
		// (a HEAD before) is what holds.
		in.IfNoneMatch, in.IfMatch = nil, nil
		in.Body = bytes.NewReader(b)
		_, err = c.s3.PutObject(ctx, in)
	}
	if err != nil {
		return c.wrapPut("store s3://"+u.Bucket+"/"+u.Key, err)
	}
	return nil
}

// conditions returns the If-None-Match and If-Match of u.
func (u Upload) conditions() (ifNoneMatch, ifMatch *string) {
	if u.IfAbsent {
		ifNoneMatch = aws.String("*")
	}
	if u.IfMatch != "" {
		ifMatch = aws.String(u.IfMatch)
	}
	return ifNoneMatch, ifMatch
}

// notImplemented says the store does not know a header of the request.
func notImplemented(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == "NotImplemented"
}

// wrapPut is Wrap, with a refused condition (412, or 409 for a
// concurrent conditional write) as ErrChanged.
func (c *Client) wrapPut(what string, err error) error {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "PreconditionFailed", "ConditionalRequestConflict":
			return fmt.Errorf("%s: %w", what, ErrChanged)
		}
	}
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) && re.HTTPStatusCode() == http.StatusPreconditionFailed {
		return fmt.Errorf("%s: %w", what, ErrChanged)
	}
	return c.Wrap(what, err)
}

// GetBytes reads a whole object of at most limit bytes.
func (c *Client) GetBytes(ctx context.Context, bucket, key string, limit int64) ([]byte, error) {
	rc, err := c.Open(ctx, bucket, key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if err != nil {
		return nil, c.Wrap("read s3://"+bucket+"/"+key, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("s3://%s/%s is larger than %d bytes", bucket, key, limit)
	}
	return b, nil
}

// Open reads an object; an error wrapping sandbox.ErrNotFound when there
// is none.
func (c *Client) Open(ctx context.Context, bucket, key string) (io.ReadCloser, error) {
	out, err := c.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		return nil, c.Wrap("read s3://"+bucket+"/"+key, err)
	}
	return out.Body, nil
}

// Delete removes an object (none is not an error).
func (c *Client) Delete(ctx context.Context, bucket, key string) error {
	if _, err := c.s3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: &key}); err != nil && !IsNotFound(err) {
		return c.Wrap("delete s3://"+bucket+"/"+key, err)
	}
	return nil
}

// Copy copies an object within a bucket (at most 5 GiB, S3's limit of one
// copy).
func (c *Client) Copy(ctx context.Context, bucket, from, to string) error {
	src := bucket + "/" + url.PathEscape(from)
	src = strings.ReplaceAll(src, "%2F", "/")
	if _, err := c.s3.CopyObject(ctx, &s3.CopyObjectInput{Bucket: &bucket, Key: &to, CopySource: &src}); err != nil {
		return c.Wrap("copy s3://"+bucket+"/"+from+" to "+to, err)
	}
	return nil
}

// Touch renews an object's LastModified: a copy onto itself that
// replaces its metadata with what it was.
func (c *Client) Touch(ctx context.Context, bucket, key string) error {
	head, err := c.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		return c.Wrap("renew s3://"+bucket+"/"+key, err)
	}
	src := strings.ReplaceAll(bucket+"/"+url.PathEscape(key), "%2F", "/")
	if _, err := c.s3.CopyObject(ctx, &s3.CopyObjectInput{
		Bucket: &bucket, Key: &key, CopySource: &src,
		MetadataDirective: types.MetadataDirectiveReplace, Metadata: head.Metadata, ContentType: head.ContentType,
	}); err != nil {
		return c.Wrap("renew s3://"+bucket+"/"+key, err)
	}
	return nil
}

// Object is one entry of a listing.
type Object struct {
	Key          string
	Size         int64
	LastModified time.Time
}

// List calls fn with every object whose key starts with prefix, in key
// order.
func (c *Client) List(ctx context.Context, bucket, prefix string, fn func(Object) error) error {
	p := s3.NewListObjectsV2Paginator(c.s3, &s3.ListObjectsV2Input{Bucket: &bucket, Prefix: &prefix})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return c.Wrap("list s3://"+bucket+"/"+prefix, err)
		}
		for _, o := range page.Contents {
			if err := fn(Object{Key: aws.ToString(o.Key), Size: aws.ToInt64(o.Size), LastModified: aws.ToTime(o.LastModified)}); err != nil {
				return err
			}
		}
	}
	return nil
}

// Upload is what Put needs besides the content.
type Upload struct {
	Bucket, Key string
	// ContentType is the object's Content-Type; empty: the store's default.
	ContentType string
	// Metadata becomes the object's x-amz-meta-* headers.
	Metadata map[string]string
	// Max bounds the content: a stream longer than Max is not stored and
	// Put returns an error wrapping ErrTooLarge. Zero: no bound but S3's.
	Max int64
	// IfAbsent stores the object only where there is none
	// (If-None-Match: *); IfMatch only over the object with this ETag.
	// When the store finds the condition false, Put returns an error
	// wrapping ErrChanged and nothing is stored. A store without
	// conditional writes (501) stores it unconditionally.
	IfAbsent bool
	IfMatch  string
}

// ErrTooLarge is what Put returns for content over Upload.Max.
var ErrTooLarge = errors.New("too large")

// Put stores what r holds as one object, in bounded memory: content that
// fits in one part goes in one request; longer content in a multipart
// upload, one part in memory at a time, which is aborted when anything
// fails (the object then does not exist). It returns the size stored.
//
// head, when not nil, is called with the start of the content (at least
// min(512, size) bytes) before anything is sent; an error from it stops
// the upload.
func (c *Client) Put(ctx context.Context, u Upload, r io.Reader, head func([]byte) error) (int64, error) {
	where := "s3://" + u.Bucket + "/" + u.Key
	buf := make([]byte, PartSize)
	n, err := io.ReadFull(r, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("store %s: read the content: %w", where, err)
	}
	last := err != nil
	if u.Max > 0 && int64(n) > u.Max {
		return 0, fmt.Errorf("store %s: the content is over %d bytes: %w", where, u.Max, ErrTooLarge)
	}
	if head != nil {
		if err := head(buf[:n]); err != nil {
			return 0, err
		}
	}
	if last {
		return int64(n), c.putBytes(ctx, u, buf[:n])
	}
	in := &s3.CreateMultipartUploadInput{Bucket: &u.Bucket, Key: &u.Key, Metadata: u.Metadata}
	if u.ContentType != "" {
		in.ContentType = &u.ContentType
	}
	mu, err := c.s3.CreateMultipartUpload(ctx, in)
	if err != nil {
		return 0, c.Wrap("store "+where, err)
	}
	done := false
	defer func() {
		if !done {
			// Aborted even when ctx is done: nothing is left half-written.
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_, _ = c.s3.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{Bucket: &u.Bucket, Key: &u.Key, UploadId: mu.UploadId})
		}
	}()
	var parts []types.CompletedPart
	var total int64
	for num := int32(1); ; num++ {
		if num > maxParts {
			return 0, fmt.Errorf("store %s: more than %d parts of %d bytes: %w", where, maxParts, PartSize, ErrTooLarge)
		}
		out, err := c.s3.UploadPart(ctx, &s3.UploadPartInput{
			Bucket: &u.Bucket, Key: &u.Key, UploadId: mu.UploadId, PartNumber: aws.Int32(num),
			Body: bytes.NewReader(buf[:n]), ContentLength: aws.Int64(int64(n)),
		})
		if err != nil {
			return 0, c.Wrap("store "+where, err)
		}
		parts = append(parts, types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(num)})
		total += int64(n)
		if last {
			break
		}
		n, err = io.ReadFull(r, buf)
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
			return 0, fmt.Errorf("store %s: read the content: %w", where, err)
		}
		last = err != nil
		if u.Max > 0 && total+int64(n) > u.Max {
			return 0, fmt.Errorf("store %s: the content is over %d bytes: %w", where, u.Max, ErrTooLarge)
		}
		if n == 0 {
			break
		}
	}
	complete := &s3.CompleteMultipartUploadInput{
		Bucket: &u.Bucket, Key: &u.Key, UploadId: mu.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
	}
	complete.IfNoneMatch, complete.IfMatch = u.conditions()
	_, err = c.s3.CompleteMultipartUpload(ctx, complete)
	if err != nil && notImplemented(err) && (complete.IfNoneMatch != nil || complete.IfMatch != nil) {
		complete.IfNoneMatch, complete.IfMatch = nil, nil
		_, err = c.s3.CompleteMultipartUpload(ctx, complete)
	}
	if err != nil {
		return 0, c.wrapPut("store "+where, err)
	}
	done = true
	return total, nil
}

// Presign returns a URL that downloads an object for ttl without
// credentials.
func (c *Client) Presign(ctx context.Context, bucket, key string, ttl time.Duration) (string, error) {
	req, err := c.presign.PresignGetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: &key}, s3.WithPresignExpires(ttl))
	if err != nil {
		return "", fmt.Errorf("presign s3://%s/%s: %w", bucket, key, err)
	}
	return req.URL, nil
}

// Ping checks that the store answers and the credentials reach bucket.
func (c *Client) Ping(ctx context.Context, bucket string) error {
	if _, err := c.s3.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &bucket}); err != nil {
		if IsNotFound(err) {
			return fmt.Errorf("reach bucket %s: the bucket does not exist: create it or name another one: %w", bucket, sandbox.ErrNotFound)
		}
		return c.Wrap("reach bucket "+bucket, err)
	}
	return nil
}

// IsNotFound reports whether err says an object or bucket does not exist.
func IsNotFound(err error) bool {
	var nk *types.NoSuchKey
	var nb *types.NoSuchBucket
	var nf *types.NotFound
	if errors.As(err, &nk) || errors.As(err, &nb) || errors.As(err, &nf) {
		return true
	}
	var ae smithy.APIError
	return errors.As(err, &ae) && (ae.ErrorCode() == "NotFound" || ae.ErrorCode() == "NoSuchKey")
}

// ErrUnavailable marks errors of a store that cannot be reached.
var ErrUnavailable = errors.New("the object store is unavailable")

// ErrDenied marks errors of credentials the store refuses.
var ErrDenied = errors.New("the object store refused the credentials")

// Wrap turns an SDK error into one that says what to do: a store that does
// not answer, credentials it refuses, a bucket or object that is not
// there. what says what was being done ("store s3://b/k").
func (c *Client) Wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", what, err)
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "Forbidden", "InvalidToken", "ExpiredToken":
			return fmt.Errorf("%s: %w (%s): check access_key_id and secret_access_key in the config file, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the daemon's environment, and that they may use this bucket", what, ErrDenied, ae.ErrorCode())
		case "NoSuchBucket":
			return fmt.Errorf("%s: the bucket does not exist: create it or name another one: %w", what, sandbox.ErrNotFound)
		case "NoSuchKey", "NotFound":
			return fmt.Errorf("%s: %w", what, sandbox.ErrNotFound)
		}
		var re interface{ HTTPStatusCode() int }
		if errors.As(err, &re) && re.HTTPStatusCode() == http.StatusForbidden {
			return fmt.Errorf("%s: %w: check the credentials and that they may use this bucket", what, ErrDenied)
		}
		return fmt.Errorf("%s: the object store said %s: %s", what, ae.ErrorCode(), ae.ErrorMessage())
	}
	var ne net.Error
	var oe *net.OpError
	if errors.As(err, &oe) || errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%s: %w at %s (%w): check that it runs and that the endpoint in the config file is right, then retry", what, ErrUnavailable, c.endpointName(), rootCause(err))
	}
	return fmt.Errorf("%s: %w", what, err)
}

func (c *Client) endpointName() string {
	if c.endpoint == "" {
		return "AWS S3"
	}
	return c.endpoint
}

func rootCause(err error) error {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err
		}
		err = u
	}
}

// PutBytesIf is PutBytes with u's conditions (IfAbsent, IfMatch): an
// error wrapping ErrChanged when the store finds them false.
func (c *Client) PutBytesIf(ctx context.Context, u Upload, b []byte) error {
	return c.putBytes(ctx, u, b)
}
